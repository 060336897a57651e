// Chinese for the cluster and camping views, the memory view, buffer names and the palette's legend
// (panel_cluster.cpp, logic/cluster_logic.cpp, panel_camping.cpp, panel_memory.cpp,
// logic/memory_logic.cpp, logic/buffer_name.cpp, logic/palette.cpp); see strings_zh.cpp for the
// conventions. The camping trip follows lesson 4's Chinese: a hiker (队员) carries gear (装备) in a
// backpack (背包); pipeline messages are notes (纸条). Spaces the formats leave between two Chinese
// words are removed by cluster_logic's narration.
#include "app/gui/logic/strings_zh.h"

namespace shardlab::gui {

const StringPairs& strings_zh_cluster() {
  static const StringPairs table = {
      // Which clock the cluster and camping views replay (panel_cluster.cpp draw_clock_choice).
      {"clock:", "时钟："},
      {"replay the run as it ran on this machine (ranks may share cores)",
       "按本机的实际运行回放（多个 rank 可能共用核心）"},
      {"as on %d devices", "按 %d 台独立设备推算"},
      {"replay the run as on one dedicated device per rank, joined by the link beside: each span "
       "costs its thread's CPU time, each transfer what the link says. Switching clocks keeps the "
       "playhead in its step.",
       "按每个 rank 一台独立设备、由旁边所选链路相连来回放：每个时间片按其线程的 CPU 时间计，"
       "每次传输按链路的带宽和延迟计。切换时钟时，播放头留在同一步。"},
      // Span kinds and memory categories (logic/palette.cpp): the legends, cards and sentences.
      {"forward", "前向"},
      {"backward", "反向"},
      {"weight gradient (W)", "权重梯度 (W)"},
      {"loss", "损失"},
      {"optimizer", "优化器"},
      {"opt", "优化"},
      {"all-reduce", "全规约"},
      {"reduce-scatter", "规约散射"},
      {"all-gather", "全收集"},
      {"broadcast", "广播"},
      {"reduce", "规约"},
      {"send", "发送"},
      {"recv", "接收"},
      {"barrier", "屏障"},
      {"bar", "屏障"},
      {"copy host\xE2\x86\x92"
       "device",
       "主机到设备拷贝"},
      {"copy device\xE2\x86\x92"
       "host",
       "设备到主机拷贝"},
      {"scatter", "分发"},
      {"gather", "收集"},
      {"data", "数据"},
      {"read", "读盘"},
      {"read from disk", "从磁盘读取"},
      {"write to disk", "写入磁盘"},
      {"write", "写盘"},
      {"params", "参数"},
      {"grads", "梯度"},
      {"optimizer state", "优化器状态"},
      {"activations", "激活值"},
      {"comm buffers", "通信缓冲区"},
      {"temporary", "临时"},

      // The cluster view (panel_cluster.cpp).
      {"No run yet. Press Run (R): each rank becomes a card showing the buffers it holds.",
       "尚未运行。按 Run (R)：每个 rank 变成一张卡片，显示它持有的缓冲区。"},
      {"At the playhead: t = %s, step %d.", "播放头处：t = %s，第 %d 步。"},
      {"Each card is a rank; each row a layer (colour = layer); each column a model state: "
       "parameters (P), gradients (G), optimizer state (O). What a card shows is read from the "
       "rank's allocation events at the playhead, by buffer name: full layers, shards "
       "('[shard i/N]') and gathered copies ('[gathered]'). While a collective runs, its pieces "
       "leave the source slot (ringed), travel in the corridor below the cards and enter the "
       "destination slot (dashed). Hover a slot for its buffers.",
       "每张卡片是一个 rank；每行是一层（颜色 = 层）；每列是一种模型状态：参数（P）、梯度（G）、"
       "优化器状态（O）。卡片上的内容按缓冲区名称读自该 rank 在播放头处的内存分配事件：完整的层、"
       "分片（'[shard i/N]'）和收集来的副本（'[gathered]'）。集合通信进行时，数据块离开源槽位"
       "（加框标出），沿卡片下方的通道移动，进入目标槽位（虚线框）。鼠标悬停在槽位上可查看其中的"
       "缓冲区。"},
      {"Now: %s", "此刻：%s"},
      {"full layer, held for good", "完整的层，一直持有"},
      {"full layer", "完整的层"},
      {"shard (part of a layer)", "分片（层的一部分）"},
      {"shard", "分片"},
      {"temporary full copy (gathered, unreduced, replica; fades when freed)",
       "临时的完整副本（收集来的、未规约的、复制的；释放后淡出）"},
      {"temporary copy", "临时副本"},
      {"in host memory (CPU offload)", "在主机内存中（CPU 卸载）"},
      {"host memory", "主机内存"},
      {"piece in flight (in the corridor, source \xE2\x86\x92 destination)",
       "传输中的数据块（在通道中，源 \xE2\x86\x92 目标）"},
      {"in flight", "传输中"},
      {"holds params %.0f%% \xC2\xB7 grads %.0f%% \xC2\xB7 optimizer state %.0f%%%s",
       "持有参数 %.0f%% \xC2\xB7 梯度 %.0f%% \xC2\xB7 优化器状态 %.0f%%%s"},
      {" (in host memory)", "（在主机内存中）"},
      {"holds P %.0f%% \xC2\xB7 G %.0f%% \xC2\xB7 O %.0f%%%s",
       "持有 P %.0f%% \xC2\xB7 G %.0f%% \xC2\xB7 O %.0f%%%s"},
      {" (host)", "（主机）"},
      {"host", "主机"},
      {"device", "设备"},
      {"now: %s", "当前：%s"},
      {"%s (host)", "%s（主机）"},
      {"flat", "扁平"},
      {"rank %d, no layer, %s", "rank %d，不属于任何层，%s"},
      {"rank %d, layer %d, %s", "rank %d，第 %d 层，%s"},
      {"act %s", "激活 %s"},
      {"act %s \xC2\xB7 comm %s \xC2\xB7 temp %s", "激活 %s \xC2\xB7 通信 %s \xC2\xB7 临时 %s"},
      {"model states of rank %d, axis by axis: whole model %s",
       "rank %d 的模型状态，逐轴来看：整个模型 %s"},
      {" (dp divides the batch, not the states)", "（dp 切分的是批次，不是模型状态）"},
      {"model states %s", "模型状态 %s"},
      {"on disk %s (optimizer state)", "磁盘上 %s（优化器状态）"},
      {"on disk %s (parameters and optimizer state)", "磁盘上 %s（参数和优化器状态）"},
      {"%s − %s on disk", "%s − 磁盘上的 %s"},
      {"on disk %s", "磁盘上 %s"},
      {"states %s", "状态 %s"},
      {"nothing held here", "这里没有持有任何缓冲区"},
      {"%s  %s  (%s, %s pool)%s", "%s  %s（%s，%s内存池）%s"},
      {"  freed, fading", "  已释放，正在淡出"},

      // What the ranks (hikers) do, for the cards and the "now" line (logic/cluster_logic.cpp).
      {"tent", "帐篷"},
      {"food", "食物"},
      {"water", "水"},
      {"emb", "嵌入"},
      {"block", "块"},
      {"head", "输出头"},
      {"%s shard %d", "%s 分片 %d"},
      {"hiker %d", "%d 号队员"},
      {"note", "纸条"},
      {"message", "消息"},
      {"rank %s", "rank %s"},
      {"ranks %s", "rank %s"},
      {"hiker %s", "%s 号队员"},
      {"hikers %s", "%s 号队员"},
      {"the weights of layer %s", "%s 层的权重"},
      {"the weights of %s", "%s 的权重"},
      {"the weights", "权重"},
      {"the gradients of layer %s", "%s 层的梯度"},
      {"the gradients of %s", "%s 的梯度"},
      {"the gradients", "梯度"},
      {"their slice of the output gradients", "各自那份输出梯度"},
      {"their slice of the batch", "各自那份批次数据"},
      {"their outputs", "自己的输出"},
      {"data of layer %s", "%s 层的数据"},
      {"data of %s", "%s 的数据"},
      {"outputs", "输出"},
      {"output gradients", "输出梯度"},
      {"batch slice", "批次切片"},
      {"%s passes %s %s (micro-batch %d's activations) on to %s",
       "%s 把%s %s（微批次 %d 的激活值）传给 %s"},
      {"%s passes %s %s (micro-batch %d's gradient) back to %s",
       "%s 把%s %s（微批次 %d 的梯度）传回给 %s"},
      {"%s passes %s %s (activations) on to %s", "%s 把%s %s（激活值）传给 %s"},
      {"%s sends %s its part of the final weights (the export)",
       "%s 把它那部分最终权重发给 %s（导出）"},
      {"%s passes %s %s (gradient) back to %s", "%s 把%s %s（梯度）传回给 %s"},
      {"its part of layer %s", "自己在 %s 层中的那一份"},
      {"its part of %s", "自己在 %s 中的那一份"},
      {"its part", "自己的那一份"},
      {"all-gather of layer %s", "%s 层的全收集"},
      {"all-gather of %s", "%s 的全收集"},
      {"%s sends %s to %s (%s)", "%s 把 %s 发给 %s（%s）"},
      {"%s send %s to %s (%s)", "%s 把 %s 发给 %s（%s）"},
      {"%s each send their part to the others (all-gather)", "%s 把各自的那一份发给彼此（全收集）"},
      {"%s each send their part of layer %s%s to the others (all-gather)",
       "%s 把 %s 层中各自的那一份%s发给彼此（全收集）"},
      {"%s each send their part of %s%s to the others (all-gather)",
       "%s 把 %s 中各自的那一份%s发给彼此（全收集）"},
      {"%s sends parts of %s to %s, who each sum the part they keep (%s)",
       "%s 把 %s 分块发给 %s，由对方各自对留下的那一块求和（%s）"},
      {"%s send each other parts of %s; each sums the part it keeps (%s)",
       "%s 把 %s 分块互相交换，各自对自己留下的那一块求和（%s）"},
      {"%s sums %s with %s (%s)", "%s 把 %s 与 %s 的那份相加（%s）"},
      {"%s sum %s with %s (%s)", "%s 把 %s 与 %s 的那份相加（%s）"},
      {"%s hands %s its slice of the output gradients (%s)",
       "%s 把输出梯度中属于 %s 的那份交给对方（%s）"},
      {"%s hands %s their slices of the output gradients (%s)",
       "%s 把输出梯度中分别属于 %s 的各份交给对方（%s）"},
      {"%s hands %s its slice of the batch (%s)", "%s 把批次数据中属于 %s 的那份交给对方（%s）"},
      {"%s hands %s their slices of the batch (%s)",
       "%s 把批次数据中分别属于 %s 的各份交给对方（%s）"},
      {"optimizer step", "优化器更新"},
      {"layer %s", "%s 层"},
      {"layers %s", "%s 层"},
      {"and %d more", "另有 %d 项"},
      {"waits for a %s", "等待%s"},
      {"waits for the others", "等待其他人到齐"},
      {"waits on %s", "等待%s完成"},
      {"Nobody is working or sharing right now.", "此刻没有人在计算或交换数据。"},
      {"every hiker: %s", "每位队员：%s"},
      {"every rank: %s", "每个 rank：%s"},
      {"%s: %s", "%s：%s"},
      {"%s wait", "%s 在等待"},
      {"all", "全部"},
      {"sending %s to %s (%s)", "正在把 %s 发给 %s（%s）"},
      {"every other hiker", "其他所有队员"},
      {"every other rank", "其他所有 rank"},
      {"%s in a %s group", "%s，%s 组内"},
      {"mesh %s: a row of cards per %s coordinate; outlined in red, each tp group (its ranks split "
       "every layer between them: a bar shows where a rank's slice lies in the layer, a block per "
       "column-parallel weight, a stripe per row of a row-parallel one)",
       "网格 %s：每个 %s 坐标一行卡片；红框圈出的是每个 tp 组（组内的 rank 把每一层切分开：条形显示"
       "该 rank 的切片在层中的位置，列并行权重是一整块，行并行权重每行一条）"},
      {"mesh %s: a row of cards per %s coordinate", "网格 %s：每个 %s 坐标一行卡片"},
      {"sending %s to %s", "正在把 %s 发给 %s"},
      {"receiving from %s (%s)", "正在接收来自 %s 的数据（%s）"},
      {"receiving %s from %s (%s)", "正在接收 %s，来自 %s（%s）"},
      {"receiving %s from %s", "正在接收 %s，来自 %s"},
      {"computing %s", "正在计算 %s"},
      {"waiting (in %s %s)", "等待中（%s %s）"},
      {"in %s %s", "正在进行%s %s"},
      {"waiting (in %s)", "等待中（%s）"},
      {"in %s", "正在进行%s"},
      {"idle", "空闲"},
      {"+%d more", "+%d 项"},
      {"out", "输出"},
      {"all the gear", "全部装备"},
      {"%s to %s", "%s 到 %s"},
      {"part %d of every layer (%s)", "每层的第 %d 份（%s）"},
      {"%s of the gear", "%s 的装备"},
      {"no gear of its own", "没有自己的装备"},
      {"%s, kept in the car (host memory)", "%s，放在车里（主机内存）"},

      // The camping trip (panel_camping.cpp).
      {"No run yet. Press Run (R): the ranks become hikers who share their gear.",
       "尚未运行。按 Run (R)：各个 rank 变成一起分担装备的队员。"},
      {"Camping trip, pipeline: each hiker is a rank and carries the gear (parameters) of its "
       "own stage's layers for the whole trip. The hikers walk one trail: a hiker's result is a "
       "note passed on to the next hiker (F3: micro-batch 3's activations), and a note passed "
       "back (B3: its gradient) on the way home. Notes a hiker keeps are activations waiting for "
       "their backward.",
       "露营之旅（流水线）：每位队员是一个 rank，整趟旅程都背着自己所在阶段各层的装备（参数）。"
       "队员们走在同一条小路上：一位队员的结果写在纸条上传给下一位队员（F3：微批次 3 的激活值），"
       "回程时再把纸条传回来（B3：它的梯度）。队员手里留着的纸条，就是等待反向计算的激活值。"},
      {"Camping trip: each hiker is a rank; each piece of gear is one layer's parameters (colour "
       "and letter = layer). A hiker carrying only part of an item holds a shard (a1 = part 1 of "
       "layer a). When a layer is needed, the hikers meet at the campfire and lend each other "
       "their parts (all-gather); borrowed copies are striped and handed back after use (freed). "
       "White pieces are gradients being summed (reduce-scatter, all-reduce).",
       "露营之旅：每位队员是一个 rank；每件装备是一层的参数（颜色和字母 = 层）。只背着一件装备的"
       "一部分的队员，持有的就是一个分片（a1 = a 层的第 1 份）。需要某一层时，队员们在营火旁会合，"
       "互相借出自己的那一份（全收集）；借来的副本画成条纹，用完就归还（释放）。白色的块是正在求和"
       "的梯度（规约散射、全规约）。"},
      {"t = %s, step %d", "t = %s，第 %d 步"},
      {"carries %s", "携带：%s"},
      {"hiker %d (rank %d)", "%d 号队员（rank %d）"},
      {"sharing at the campfire", "大家在营火旁分享装备"},
      {"campfire (nobody sharing)", "营火（没有人在分享）"},
      {"%d note kept", "留着 %d 张纸条"},
      {"%d notes kept", "留着 %d 张纸条"},
      {"borrowed", "借来的"},
      {"batch", "批次"},

      // The memory view (panel_memory.cpp, logic/memory_logic.cpp).
      {"total", "合计"},
      {"No run yet. Press Run (R): memory is measured from every allocation the ranks make.",
       "尚未运行。按 Run (R)：内存由各 rank 的每一次分配实测得出。"},
      {"| measured by each rank's accounting allocator (device pool)",
       "| 由每个 rank 的记账分配器实测（设备内存池）"},
      {"Left: bytes in use over time, stacked by category, on the timeline's time axis (wheel: "
       "zoom, drag: pan, click: move the playhead). Right: each rank at the playhead. The white "
       "marker is the predicted model-state memory (params + grads + optimizer state) from the "
       "ZeRO paper's formula, where the strategy has one: compare it with the bottom three "
       "colours of the bar.",
       "左侧：随时间变化的已用字节数，按类别堆叠，与时间线共用时间轴（滚轮：缩放，拖动：平移，"
       "点击：移动播放头）。右侧：每个 rank 在播放头处的状态。白色标记是按 ZeRO 论文公式预测的"
       "模型状态内存（参数 + 梯度 + 优化器状态），仅在该策略有公式时显示：把它与柱形最下面的三种"
       "颜色比一比。"},
      {"rank %d host", "rank %d 主机"},
      {"predicted %s (%s)", "预测 %s（%s）"},
      {"predicted %s", "预测 %s"},
      {"pred. %s", "预测 %s"},
      {"at the playhead, t = %s", "播放头处，t = %s"},
      {"peak %s", "峰值 %s"},
      {"peak predicted before the run %s", "运行前预测的峰值 %s"},
      {"predicted peak %s", "预测峰值 %s"},
      {"pred. peak %s", "预测峰值 %s"},
      {"%s at %s", "%s 在 %s 时"},
      {"no formula for %s", "%s 没有公式"},
      {"no formula", "没有公式"},
      {"(nothing allocated)", "（尚未分配）"},
      {"(none)", "（无）"},
      {"no transformer block here", "这里没有 Transformer 块"},
      {"%d block \xC3\x97 %s", "%d 个块 \xC3\x97 %s"},
      {"%d blocks \xC3\x97 %s", "%d 个块 \xC3\x97 %s"},
      {"Korthikanti, no dropout", "Korthikanti，无 dropout"},
      {"Korthikanti, no dropout, flash", "Korthikanti，无 dropout，flash 注意力"},
      {"b=%d per micro-batch", "b=%d（每个微批次）"},
      {"b=%d sequences", "b=%d 条序列"},
  };
  return table;
}

}  // namespace shardlab::gui
