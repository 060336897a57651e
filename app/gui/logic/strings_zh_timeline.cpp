// Chinese for the timeline, the replay bar, the loss view and shared formats
// (panel_timeline.cpp, logic/timeline_logic.cpp, logic/projected_run.cpp, panel_replay.cpp,
// logic/wait_logic.cpp, logic/format.cpp, panel_loss.cpp); see strings_zh.cpp for the conventions.
#include "app/gui/logic/strings_zh.h"

namespace shardlab::gui {

const StringPairs& strings_zh_timeline() {
  static const StringPairs table = {
      // The timeline's rows and their tooltips (app/gui/panel_timeline.cpp).
      {"compute", "计算"},
      {"comm", "通信"},
      {"disk", "磁盘"},
      {"comm %s", "通信 %s"},
      {"rank %d", "rank %d"},
      {"\xC2\xB7 %s (micro-batch %d)", "\xC2\xB7 %s（微批次 %d）"},
      {"\xC2\xB7 layer %d", "\xC2\xB7 第 %d 层"},
      {"rank %d, %s lane, step %d", "rank %d 的%s道，第 %d 步"},
      {"server", "服务器"},
      {"worker", "工作节点"},
      {"computed with parameters %d updates old (asynchronous: --staleness)",
       "所用参数落后 %d 次更新（异步：--staleness）"},
      {"computed with the latest update's parameters (staleness 0)",
       "所用参数来自最新一次更新（陈旧度 0）"},
      {"rank %d, %s lane, outside the training steps (set-up or tear-down)",
       "rank %d 的%s道，不属于任何训练步（初始化或收尾）"},
      {"starts at %s, lasts %s", "开始于 %s，持续 %s"},
      {"payload %s", "数据量 %s"},
      {"made ahead by the rank's data loader while the previous step ran: this is the copy in",
       "由该 rank 的数据加载器在上一步运行时提前做好：这里只是拷入"},
      {"from rank %d", "来自 rank %d"},
      {"to rank %d", "发往 rank %d"},
      {"peer/root rank %d", "对端/根 rank %d"},
      {"until rank %d began sending", "直到 rank %d 开始发送"},
      {"until rank %d posted its receive", "直到 rank %d 发起接收"},
      {"until rank %d, the last, entered", "直到最后到达的 rank %d 进入"},
      {"%s %s (%s: idle, not communication),", "%s %s（%s：空闲，不算通信），"},
      {"then moving bytes %s", "随后传输数据 %s"},
      {"%u spans folded together (each narrower than %.0f px)",
       "%u 个时间片合为一块（每个都窄于 %.0f px）"},
      {"from %s to %s, mostly %s", "从 %s 到 %s，主要是 %s"},
      {"zoom in (mouse wheel) to see them one by one", "放大（鼠标滚轮）可逐个查看"},
      {"%s: rank %d neither computes nor moves bytes for %s",
       "%s：rank %d 有 %s 既不计算也不传输数据"},
      {"it waits for a neighbouring stage: the pipeline bubble",
       "它在等待相邻阶段：这就是流水线气泡"},
      {"it waits for a peer (a message, or the others in a collective)",
       "它在等待对端（一条消息，或集合通信中的其他 rank）"},
      // Where each rank's time went in one step (panel_timeline.cpp).
      {"Step %d as on %d devices joined by %s, %s: where each rank's time went",
       "第 %d 步，按 %d 台以 %s 相连的设备计算，%s：各 rank 的时间花在哪里"},
      {"The run replayed on one dedicated device per rank: each op costs the CPU time its "
       "thread used, each transfer the link's time. No rank waits for a core here, so the "
       "idle time is what the schedule leaves: in a pipeline the bubble, waiting for a "
       "neighbouring stage's activation or gradient, which (P-1)/(M+P-1) describes; "
       "elsewhere the wait for a late peer. Moving bytes, exposed, is the link's time "
       "that no computation hides.",
       "把这次运行放到每个 rank 一台专属设备上重放：每个操作按其线程实际用掉的 CPU 时间计，"
       "每次传输按链路的时间计。这里没有 rank 需要等 CPU 核，所以空闲时间就是调度本身留下的："
       "在流水线中是气泡，即等待相邻阶段的激活或梯度，也就是 (P-1)/(M+P-1) 所描述的；"
       "在其他策略中是等待迟到的同伴。暴露的数据传输，是没有被任何计算掩盖的链路时间。"},
      {"on %d devices", "%d 台设备上"},
      {"Step %d (%s), %s: where each rank's time went",
       "第 %d 步（%s），%s：各 rank 的时间花在哪里"},
      {"the last finished one", "最近完成的一步"},
      {"the playhead's", "播放头所在的一步"},
      {"warm-up; the last finished one", "预热步；最近完成的一步"},
      {"warm-up; the playhead's", "预热步；播放头所在的一步"},
      {"The step runs from the first compute span any rank begins in it to the last span any "
       "rank ends. A rank is computing while it has a compute span; moving bytes while a comm "
       "span of it is past its wait; otherwise idle. A recv waits until its sender begins the "
       "send, a send until its receiver has posted the recv, a collective until the last rank "
       "has entered it: that wait is idle, not communication. On loopback a few KiB move in "
       "microseconds; milliseconds of moving bytes mean the transport's thread or the "
       "receiving rank waited for a CPU core (more busy threads than cores).",
       "一步从任一 rank 在该步开始的第一个计算时间片算起，到任一 rank 结束的最后一个时间片为止。"
       "rank 有计算时间片时算作计算；它的通信时间片过了等待部分之后算作传输数据；其余时间为空闲。"
       "接收要等发送方开始发送，发送要等接收方发起接收，集合通信要等最后一个 rank 进入："
       "这段等待是空闲，不算通信。在本机回环上，几 KiB 数据只需几微秒；传输数据若以毫秒计，"
       "说明传输线程或接收方 rank 在等待 CPU 核（忙碌的线程多于核数）。"},
      {"computing", "计算"},
      {"moving bytes hidden behind compute", "与计算重叠的数据传输"},
      {"moving bytes (exposed)", "暴露的数据传输"},
      {"%s (waiting for a neighbouring stage)", "%s（等待相邻阶段）"},
      {"%s (for a peer)", "%s（等待对端）"},
      {"rank", "rank"},
      {"moving bytes, hidden", "数据传输（重叠）"},
      {"moving bytes, exposed", "数据传输（暴露）"},
      // A pipeline run's stages (panel_timeline.cpp).
      {"Per stage: the measured bubble beside (P-1)/(M+P-1) shows here when the run has finished.",
       "各阶段：实测气泡与公式 (P-1)/(M+P-1) 的对照会在运行结束后显示在这里。"},
      {"over steps 1..%d", "基于第 1 至 %d 步"},
      {"in step 0", "基于第 0 步"},
      {"The order each stage ran, %s, as a schedule:", "各阶段实际执行的顺序（%s），写成调度："},
      {"Read from the recording: F3 is micro-batch 3's forward through the stage's layers, B3 its "
       "backward. The playhead's action is highlighted, the done ones are bright. 'shardlab "
       "schedule NAME' prints a named schedule in the same language, and checks one you write.",
       "读自录制：F3 是微批次 3 在本阶段各层的前向，B3 "
       "是它的反向。播放头所在的动作高亮显示，已完成的"
       "动作以亮色显示。'shardlab schedule 名称' "
       "用同一种语言打印具名调度，也能检查你自己写的调度。"},
      {"stage %d:", "阶段 %d："},
      {"Per stage, %s: P = %d stages, M = %d micro-batch",
       "各阶段（%s）：P = %d 个阶段，M = %d 个微批次"},
      {"Per stage, %s: P = %d stages, M = %d micro-batches",
       "各阶段（%s）：P = %d 个阶段，M = %d 个微批次"},
      {"measured bubble: the share of each step (first to last compute span of any stage) a "
       "stage is not computing, averaged over the steps after the first. The formula "
       "(P-1)/(M+P-1) assumes equal stages and free communication; on a machine with fewer "
       "cores than ranks, waiting for a core adds to the measured one. Activations in flight: "
       "the stage's peak activation bytes (allocator) divided by what one micro-batch keeps "
       "until its backward.",
       "实测气泡：一步之中（从任一阶段的第一个计算时间片到最后一个）某阶段不在计算的时间占比，"
       "对第一步之后的各步取平均。公式 (P-1)/(M+P-1) 假设各阶段耗时相等、通信不花时间；"
       "在 CPU 核少于 rank 数的机器上，等待 CPU 核的时间也会计入实测值。在途激活值："
       "该阶段的激活值峰值字节数（来自分配器）除以一个微批次在其反向之前要保留的字节数。"},
      {"stage", "阶段"},
      {"layers", "层"},
      {"bubble, measured (not computing)", "实测气泡（未在计算）"},
      {"peak activations", "激活值峰值"},
      {"in flight, measured", "在途数（实测）"},
      {"expected", "预期"},
      {"%s (predicted %s)", "%s（预测 %s）"},
      {"%.1f \xC3\x97 %s (inputs)", "%.1f \xC3\x97 %s（输入）"},
      // The timeline's toolbar (panel_timeline.cpp).
      {"Nothing recorded yet. The settings above cannot run (see the red line); fix them, then "
       "Run (R).",
       "尚无记录。上方的设置无法运行（见红色提示行）；改正后再按“运行 (R)”。"},
      {"Nothing recorded yet. Press Run (R) to train the configuration above: every rank is a "
       "thread, talking to the others through Gloo. Each rank's spans appear here while it runs.",
       "尚无记录。按“运行 (R)”训练上方的配置：每个 rank 是一个线程，通过 Gloo 与其他 rank "
       "通信。运行时，各 rank 的时间片会出现在这里。"},
      {"bubble (idle)", "气泡（空闲）"},
      {"waiting (idle)", "等待（空闲）"},
      {"All steps (F)", "全部步 (F)"},
      {"every training step; from step 1 when step 0, the warm-up, took over %.0fx a later "
       "step (on a GPU: loading cuBLAS and the kernels), which would squeeze the others into a "
       "sliver. 'With setup' shows it.",
       "全部训练步；若第 0 步（预热）耗时超过之后一步的 %.0f 倍（在 GPU 上：加载 cuBLAS "
       "和内核），会把其他步挤成一条细线，这时从第 1 步开始显示。“含初始化”会显示它。"},
      {"With setup", "含初始化"},
      {"the whole run, including the setup before step 0 (e.g. replicating the weights)",
       "整个运行，包括第 0 步之前的初始化（例如复制权重）"},
      {"One step", "只看一步"},
      {"the step before", "上一步"},
      {"the step after", "下一步"},
      {"send\xE2\x86\x92recv lines", "发送\xE2\x86\x92接收连线"},
      {"F3/B3/R3 = forward/backward/recompute of micro-batch 3 \xC2\xB7 wheel: zoom \xC2\xB7 "
       "drag: pan \xC2\xB7 click: playhead",
       "F3/B3/R3 = 微批次 3 的前向/反向/重计算 \xC2\xB7 滚轮：缩放 \xC2\xB7 拖动：平移 \xC2\xB7 "
       "单击：设置播放头"},
      {"wheel: zoom \xC2\xB7 drag: pan \xC2\xB7 click: playhead \xC2\xB7 double-click: fit "
       "\xC2\xB7 L = layer",
       "滚轮：缩放 \xC2\xB7 拖动：平移 \xC2\xB7 单击：设置播放头 \xC2\xB7 双击：适配窗口 "
       "\xC2\xB7 L = 层"},
      // Span and step labels (app/gui/logic/timeline_logic.cpp).
      {"other", "其他操作"},
      {"step %d", "第 %d 步"},
      {"step %d (warm-up)", "第 %d 步（预热）"},
      // What idle time is called (app/gui/logic/wait_logic.cpp).
      {"bubble", "气泡"},
      {"waiting", "等待"},
      // The replay bar (app/gui/panel_replay.cpp).
      {"to the start (Home)", "回到开头 (Home)"},
      {"< event", "< 事件"},
      {"previous event: a span starting or ending, an allocation (Left)",
       "上一个事件：时间片的开始或结束、一次内存分配 (Left)"},
      {"Pause replay", "暂停回放"},
      {"Play replay", "开始回放"},
      {"replay the recorded run (Space)", "回放录制的运行 (Space)"},
      {"event >", "事件 >"},
      {"next event (Right)", "下一个事件 (Right)"},
      {"collective >", "集合通信 >"},
      {"the middle of the next collective or send: pieces in flight in the cluster view (C)",
       "跳到下一次集合通信或发送的中途：在集群视图 (C) 中可看到正在传输的数据块"},
      {"follow live", "跟随实时"},
      {"speed", "速度"},
      {"run time per wall time: at 1/1000%s one millisecond of the run lasts one second",
       "运行时间与墙钟时间之比：在 1/1000%s 时，运行中的 1 毫秒回放 1 秒"},
      {"replay: nothing recorded yet (Run first)", "回放：尚无记录（请先运行）"},
      {"nothing recorded yet", "尚无记录"},
      {"t = %s of %s \xC2\xB7 step %d \xC2\xB7 event %zu of %zu",
       "t = %s / %s \xC2\xB7 第 %d 步 \xC2\xB7 第 %zu 个事件，共 %zu 个"},
      {"t = %s of %s \xC2\xB7 step %d", "t = %s / %s \xC2\xB7 第 %d 步"},
      {"t = %s \xC2\xB7 step %d", "t = %s \xC2\xB7 第 %d 步"},
      {"the whole run; ticks mark the steps; click or drag to move the playhead",
       "整个运行；刻度标出各步；单击或拖动可移动播放头"},
      // "As on N devices" under the measured rows (panel_timeline.cpp, logic/projected_run.cpp).
      {"As on %d devices", "按 %d 台独立设备推算"},
      {"also draw the run as on one dedicated device per rank, joined by the link beside, under "
       "the rows measured here, on the same time scale: each compute span costs its thread's CPU "
       "time (what it would take on a core of its own), each transfer what the link's bandwidth "
       "and latency say",
       "在本机实测的各行下方，以同一时间刻度再画出按每个 rank 一台独立设备（由旁边所选链路相连）"
       "推算的运行：每个计算时间片按其线程的 CPU 时间计（即独占一个核心时的耗时），每次传输按链路"
       "的带宽和延迟计"},
      {"the link joining the devices: loopback (this machine, Gloo over TCP, measured once), "
       "pcie4 (25 GB/s, 5 us), nvlink-h100 (450 GB/s, 2 us), eth100 (12.5 GB/s, 10 us), ib400 "
       "(50 GB/s, 2 us)",
       "连接各设备的链路：loopback（本机，Gloo 走 TCP，实测一次）、pcie4（25 GB/s，5 us）、"
       "nvlink-h100（450 GB/s，2 us）、eth100（12.5 GB/s，10 us）、ib400（50 GB/s，2 us）"},
      {"measured here", "本机实测"},
      {"measured here \xC2\xB7 %d rank on %d cores", "本机实测 \xC2\xB7 %d 个 rank，%d 个核心"},
      {"measured here \xC2\xB7 %d ranks on %d cores",
       "本机实测 \xC2\xB7 %d 个 rank 共用 %d 个核心"},
      {"measured here \xC2\xB7 %d ranks on %d GPU(s)",
       "本机实测 \xC2\xB7 %d 个 rank 共用 %d 块 GPU"},
      {"as on %d \xC3\x97 %s, %s", "按 %d \xC3\x97 独立 %s 推算，链路 %s"},
      {"CPU core", "CPU 核心"},
      {"GPU", "GPU"},
      {"As on N devices: the run is still going; it is projected when it has finished.",
       "按 N 台独立设备推算：运行尚未结束；结束后再做投影。"},
      {"As on N devices: no finished run to project yet; Run (R) one to the end.",
       "按 N 台独立设备推算：还没有可投影的已完成运行；请先“运行 (R)”直到结束。"},
      {"As on N devices: this run cannot be projected: %s",
       "按 N 台独立设备推算：此运行无法投影：%s"},
      // The loss view (app/gui/panel_loss.cpp).
      {"No finished step yet. Press Run (R): the global loss (mean over the whole batch) appears "
       "here after every step.",
       "尚无完成的步。按“运行 (R)”：每步结束后，这里会显示全局损失（整个批次上的均值）。"},
      {"Training loss (%s), %zu steps; last %.6g", "训练损失（%s），%zu 步；最新 %.6g"},
      {"step", "步"},
      {"step %d: loss %.6g", "第 %d 步：损失 %.6g"},
      // What the loss curve is (app/gui/logic/format.cpp).
      {"cross-entropy over every position of the global batch", "全局批次所有位置上的交叉熵"},
      {"over the global batch", "全局批次上的均值"},
      {"MSE over the global batch", "全局批次上的 MSE"},
      // The loss view's comparison curves (panel_loss.cpp).
      {"%s (shown)", "%s（当前显示）"},
      {"%s: loss %.6g", "%s：损失 %.6g"},
      {"final weights: %s", "最终权重：%s"},
  };
  return table;
}

}  // namespace shardlab::gui
