// The Chinese for every string the app's views show, keyed by the English.
// Terms follow the lessons' glossary: rank, all-reduce (全规约), all-gather
// (全收集), reduce-scatter (规约散射), micro-batch (微批次), bubble (气泡).
// Metric names, units, strategy names and command lines stay as they are.
// A printf conversion (%d, %.2f, %s) appears in the same order in both.
#include "app/gui/logic/strings_zh.h"
#include "app/gui/logic/i18n.h"

namespace shardlab::gui {

const std::vector<std::pair<const char*, const char*>>& string_table() {
  static const StringPairs table = [] {
    StringPairs all;
    for (const StringPairs* part :
         {&strings_zh_app(), &strings_zh_timeline(), &strings_zh_cluster(), &strings_zh_compare()})
      all.insert(all.end(), part->begin(), part->end());
    return all;
  }();
  return table;
}

const StringPairs& strings_zh_app() {
  static const StringPairs table = {
      // The lesson player (app/gui/panel_lessons.cpp).
      {"Lessons", "课程"},
      {"Still to come", "即将推出"},
      {"Lesson", "课程"},
      {"Step %d of %zu", "第 %d 步，共 %zu 步"},
      {"Prev", "上一步"},
      {"Next", "下一步"},
      {"All lessons", "全部课程"},
      {"Run this step", "运行本步"},
      {"Running...", "正在运行……"},
      {"Reveal", "揭晓答案"},
      {"Skip", "跳过"},
      {"Your prediction", "你的预测"},
      {"Your answer", "你的答案"},
      {"Formula", "公式"},
      {"Measured", "实测"},
      // Fixed formula texts beside a metric (core/run/metrics.cpp).
      {"in flight × one micro-batch's activations", "在途微批次数 × 一个微批次的激活值"},
      {"in flight × stage input + one micro-batch recomputed",
       "在途微批次数 × 阶段输入 + 一个重算的微批次"},
      {"run b's predicted peak − run a's", "运行 b 的预测峰值 − 运行 a 的"},
      {"0 (up to float32 reduction order)", "0（至多相差 float32 的规约顺序）"},
      {"the optimizer state of the rank's padded shards (8 B a parameter, 12 B in mixed "
       "precision), once a step",
       "该 rank 各分片（含填充）的优化器状态（每个参数 8 B，混合精度 12 B），每步一次"},
      {"the rank's optimizer state once, and its parameter shards before each all-gather "
       "and for an fp32 update",
       "该 rank 的优化器状态一次，加上每次全收集之前及 fp32 更新时读入的参数分片"},
      {"the rank's optimizer state and its updated parameter shards, once a step",
       "该 rank 的优化器状态和更新后的参数分片，每步一次"},
      {"W·Ψ/S: its shard of the parameters to each of the W workers",
       "W·Ψ/S：把它的参数分片发给 W 个工作节点中的每一个"},
      {"Ψ: each server's shard of the gradient", "Ψ：给每个服务器发送它那一份梯度"},
      {"W·Ψ/S: its shard's gradient from each of the W workers",
       "W·Ψ/S：从 W 个工作节点各收到一份它那一片的梯度"},
      {"Ψ: every server's shard of the parameters", "Ψ：从每个服务器收到它那一份参数"},
      {"the bound, --staleness K", "上限，--staleness K"},
      {"none: BatchNorm's statistics over part of the batch are not the whole batch's",
       "无：BatchNorm 在部分批次上的统计量不等于整个批次的"},
      {"right", "正确"},
      {"not right", "不对"},
      {"no answer", "未作答"},
      {"Checks", "检验"},
      {"PASS", "通过"},
      {"FAIL", "未通过"},
      {"Look at", "请看"},
      {"This step has no run: read, then go on.", "本步没有运行：读完即可继续。"},
      {"The run failed", "运行失败"},
      {"steps", "步"},
      {"done", "已完成"},
      {"Page Down: run, reveal, next step. Page Up: back. Enter: run / reveal.",
       "Page Down：运行、揭晓、下一步。Page Up：返回。Enter：运行 / 揭晓。"},
      {"Answer first, or press Skip.", "先作答，或按“跳过”。"},
      {"within", "容差"},
      {"The lessons could not all be read", "部分课程文件无法读取"},
      {"Language", "语言"},
      {"compare run", "对比运行"},
      {"recorded run", "录制的运行"},
      {"recorded on", "录制于"},
      {"the start of step %d", "第 %d 步开始处"},
      {"rank %d's memory peak", "rank %d 的内存峰值"},
      {"bytes (KiB, MiB allowed)", "字节（可写 KiB、MiB）"},
      {"%s (right within %g%% of the measured value)", "%s（与实测相差 %g%% 以内算对）"},
      // The views' tabs and the status line (app/gui/app.cpp).
      {"Timeline", "时间线"},
      {"Memory", "内存"},
      {"Cluster", "集群"},
      {"Camping trip", "露营之旅"},
      {"Compare", "对比"},
      {"Loss", "损失"},
      {"replay: Run (R) runs it live", "回放：按“运行 (R)”在本机实时运行"},
      {"replay only", "仅回放"},
      {"no run yet: press Run (R)", "尚未运行：按“运行 (R)”"},
      {"connecting ranks...", "正在连接各 rank……"},
      {"paused after step %d/%d", "已暂停于第 %d/%d 步之后"},
      {"running step %d/%d", "正在运行第 %d/%d 步"},
      {"%d processes, watched live", "%d 个进程，实时观察"},
      {"finished %d steps as %d processes", "已完成 %d 步（%d 个进程）"},
      {"finished %d steps", "已完成 %d 步"},
      {"median step %.2f ms \xC2\xB7 final loss %.4g", "每步中位数 %.2f ms \xC2\xB7 最终损失 %.4g"},
      {"run failed: %s", "运行失败：%s"},
      {"cancelled", "已取消"},
      // The run bar (app/gui/panel_run_bar.cpp).
      {"%s (%s)\nused by %s", "%s（%s）\n使用它的策略：%s"},
      {"%s does not read it", "%s 不读取此项"},
      {"Optimizer", "优化器"},
      {"Seed", "随机种子"},
      {"Bucket MiB", "桶大小 MiB"},
      {"gradient bucket size in MiB", "梯度桶的大小（MiB）"},
      {"overlap", "重叠"},
      {"all-reduce buckets during backward (off: --no-overlap)",
       "在反向传播期间全规约各个桶（关闭：--no-overlap）"},
      {"prefetch", "预取"},
      {"start the next all-gather early (off: --no-prefetch)",
       "提前开始下一次全收集（关闭：--no-prefetch）"},
      {"FSDP unit", "FSDP 单元"},
      {"layers per FSDP unit", "每个 FSDP 单元的层数"},
      {"reshard", "重新分片"},
      {"free gathered params after forward (off: --no-reshard)",
       "前向之后释放收集来的参数（关闭：--no-reshard）"},
      {"offload", "卸载"},
      {"model states in host memory", "模型状态放在主机内存中"},
      {"offload params", "卸载参数"},
      {"offload-params", "卸载参数"},
      {"parameter shards in the offload file too", "参数分片也放进卸载文件"},
      {"recompute", "重计算"},
      {"recompute forward in backward", "在反向中重新计算前向"},
      {"Partition", "划分"},
      {"balanced", "均衡"},
      {"layers per stage, e.g. 3,2,2,1", "每个阶段的层数，例如 3,2,2,1"},
      {"Schedule", "调度"},
      {"a schedule file: one line of F/B/W actions per rank",
       "调度文件：每个 rank 一行 F/B/W 动作"},
      {"Chunks per rank", "每个 rank 的模型块数"},
      {"model chunks per rank (V), dealt round-robin", "每个 rank 的模型块数（V），轮流分配"},
      {"(2)", "（2）"},
      {"Servers", "服务器数"},
      {"ranks that hold the parameters (the first ones)", "保存参数的 rank（最前面的几个）"},
      {"Staleness", "陈旧度"},
      {"bars: the most stale worker's parameters each step, in updates behind (up to %d)",
       "柱：每步最陈旧的工作节点所用参数落后的更新次数（最多 %d）"},
      {"the most stale worker computed it with parameters %d updates old",
       "最陈旧的工作节点用落后 %d 次更新的参数计算这一步"},
      {"updates a worker's parameters may lag (0: synchronous)",
       "工作节点的参数最多可落后几次更新（0：同步）"},
      {"Mesh", "设备网格"},
      {"(the mesh's pp)", "（网格的 pp 轴）"},
      {"ranks on axes, e.g. dp=2,pp=2 or dp=2,tp=2", "各轴上的进程，例如 dp=2,pp=2 或 dp=2,tp=2"},
      {"Mesh order", "网格顺序"},
      {"sequence parallel", "序列并行"},
      {"sp", "序列并行"},
      {"gpt on a tp axis: tokens split between the tp regions",
       "tp 轴上的 gpt：在张量并行区域之间切分词元"},
      {"ZeRO-1 over dp", "dp 上的 ZeRO-1"},
      {"zero1", "ZeRO-1"},
      {"each dp replica keeps the optimizer state of its own parameters only",
       "每个 dp 副本只保存自己那些参数的优化器状态"},
      {"the mesh's axes, outermost first (default pp,dp,tp)",
       "网格的各轴，最外层在前（默认 pp,dp,tp）"},
      {"Backend", "后端"},
      {"Model", "模型"},
      {"mlp:LxD = L Linear(D,D) layers with GELU between; mlp:LxD+bn puts a BatchNorm1d before "
       "each GELU; gpt:LxDxH = a nanoGPT of L blocks, width D, H heads",
       "mlp:LxD = L 个 Linear(D,D) 层，层间接 GELU；mlp:LxD+bn 在每个 GELU 前加一个 BatchNorm1d；"
       "gpt:LxDxH = L 个块、宽度 D、H 个头的 nanoGPT"},
      {"Strategy", "策略"},
      {"World", "World"},
      {"ranks (processes talking through Gloo)", "rank 数（各进程通过 Gloo 通信）"},
      {"ranks (threads talking through Gloo)", "rank 数（各线程通过 Gloo 通信）"},
      {"processes", "多进程"},
      {"one process per rank, started with 'shardlab launch' and watched live (off: one thread per "
       "rank in this app). Pause and Step need threads.",
       "每个 rank 一个进程，由 'shardlab launch' 启动并实时观察（关闭：在本应用中每个 rank "
       "一个线程）。"
       "暂停和单步需要线程。"},
      {"Batch", "批大小"},
      {"global batch, split across data-parallel ranks", "全局批大小，在数据并行的 rank 间切分"},
      {"Micro-batches", "微批次"},
      {"micro-batches per batch", "每批的微批次数"},
      {"Stages", "阶段"},
      {"pipeline stages (0 = one per rank)", "流水线阶段数（0 = 每个 rank 一个）"},
      {"(one per rank)", "（每个 rank 一个）"},
      {"Steps", "步数"},
      {"training steps", "训练步数"},
      {"Precision", "精度"},
      {"bf16/fp16: mixed precision, fp32 master weights", "bf16/fp16：混合精度，fp32 主权重"},
      {"Device", "设备"},
      {"Options", "选项"},
      {"optimizer, seed and strategy options", "优化器、随机种子和策略选项"},
      {"Resume (R)", "继续 (R)"},
      {"Run (R)", "运行 (R)"},
      {"Pause (P)", "暂停 (P)"},
      {"Step (S)", "单步 (S)"},
      {"Reset", "重置"},
      {"processes run on their own: Pause and Step need one thread per rank (untick 'processes')",
       "进程各自运行：暂停和单步需要每个 rank 一个线程（取消勾选“多进程”）"},
      {"run exactly one more training step, then pause", "再运行一个训练步，然后暂停"},
      {"Use --device cpu", "改用 --device cpu"},
      {"Cannot run these settings: %s", "无法按这些设置运行：%s"},
      {"Reset what %s does not read", "重置 %s 不读取的选项"},
      {"Placement: %s", "放置：%s"},
      // The strategies' one-line summaries (core; the run bar's strategy list).
      {"DistributedDataParallel: full replicas, bucketed gradient all-reduce overlapped with "
       "backward",
       "DistributedDataParallel：完整副本，分桶的梯度全规约与反向传播重叠"},
      {"DataParallel (single process): device 0 broadcasts weights, scatters the batch, gathers "
       "outputs, reduces gradients and updates",
       "DataParallel（单进程）：0 号设备广播权重、分发批数据、收集输出、规约梯度并更新"},
      {"FullyShardedDataParallel: units of --fsdp-unit layers with one flat sharded parameter; "
       "reshard after forward, backward prefetch, optional offload to CPU or NVMe",
       "FullyShardedDataParallel：每 --fsdp-unit 层为一个单元，共用一个扁平的分片参数；"
       "前向后重新分片、反向预取、可选卸载到 CPU 或 NVMe"},
      {"GPipe: micro-batches, all forwards then all backwards, one flush (--recompute to save "
       "activations)",
       "GPipe：微批次，先全部前向再全部反向，一次冲刷（--recompute 节省激活值）"},
      {"naive model parallelism: consecutive layers per rank, one batch, one stage busy at a time",
       "朴素模型并行：每个 rank 持有连续的若干层，一整批，同一时刻只有一个阶段在忙"},
      {"1F1B (PipeDream-Flush): warm-up, alternate one forward and one backward, cool-down; "
       "activations of at most P - rank micro-batches",
       "1F1B（PipeDream-Flush）：预热，一次前向与一次反向交替，冷却；最多保存 P - rank "
       "个微批次的激活值"},
      {"Zero bubble H1: 1F1B with each backward split into B (input gradient) and W "
       "(weight gradient), W deferred into the bubble; activations of at most P micro-batches",
       "零气泡 H1：1F1B 的顺序，每次反向拆成 B（输入梯度）和 W（权重梯度），W 推迟到气泡中；"
       "最多保存 P 个微批次的激活值"},
      {"Interleaved 1F1B (Megatron): V model chunks per rank dealt round-robin; "
       "bubble (P-1)/(V*M) of the compute for V times the messages",
       "交错式 1F1B（Megatron）：每个 rank 持有 V 个模型块，轮流分配；"
       "气泡降为计算的 (P-1)/(V*M)，代价是 V 倍的消息"},
      {"parameter server: --servers ranks own the parameter shards and the optimizer, "
       "the other ranks compute gradients, push them and pull the parameters; "
       "--staleness K lets workers run K updates ahead",
       "参数服务器：--servers 个 rank 保存参数分片和优化器，其余 rank "
       "计算梯度、推送梯度并拉取参数；"
       "--staleness K 允许工作节点领先 K 次更新"},
      {"the reference: whole model and batch on one device",
       "参照：整个模型和整批数据在一台设备上"},
      {"ZeRO stage 1: optimizer state sharded 1/N; reduce-scatter grads, update own shard, "
       "all-gather params",
       "ZeRO 第 1 阶段：优化器状态切分为 1/N；规约散射梯度，更新自己的分片，全收集参数"},
      {"ZeRO stage 2: optimizer state and gradients sharded 1/N; per-layer reduce-scatter frees "
       "each full gradient",
       "ZeRO 第 2 阶段：优化器状态和梯度切分为 1/N；逐层规约散射后释放完整梯度"},
      {"ZeRO stage 3: params, grads and optimizer state sharded 1/N; all-gather each layer before "
       "forward and backward, reduce-scatter its gradient",
       "ZeRO 第 3 阶段：参数、梯度和优化器状态切分为 1/N；每层在前向和反向前全收集，"
       "再规约散射其梯度"},
      {"%d ranks on %d cores: timings stretched", "%d 个 rank 共用 %d 个核：时间被拉长"},
      {"%d ranks on %d cores: ranks take turns on the cores, so step times and compute spans are "
       "stretched and waits grow; compare timings at world \xE2\x89\xA4 %d here",
       "%d 个 rank 共用 %d 个核：各 rank 轮流占用核，步时和计算区段都被拉长，等待也变长；"
       "在本机请用 world \xE2\x89\xA4 %d 比较时间"},
  };
  return table;
}

}  // namespace shardlab::gui
