// Chinese for the compare view, the export window, presenter settings and recordings
// (panel_compare.cpp, logic/compare_logic.cpp, panel_export.cpp, panel_presenter.cpp,
// logic/recording_view.cpp); see strings_zh.cpp for the conventions.
#include "app/gui/logic/strings_zh.h"

namespace shardlab::gui {

const StringPairs& strings_zh_compare() {
  static const StringPairs table = {
      // The compare view (app/gui/panel_compare.cpp).
      {"Timelines", "时间线"},
      {"Memory over time", "内存随时间变化"},
      {"Peak memory by category", "按类别的内存峰值"},
      {"bucket MiB", "桶 MiB"},
      {"unit", "单元"},
      {"mesh", "网格"},
      {"world size: ranks (threads) of this run", "world size：本次运行的 rank（线程）数"},
      {"micro-batches per global batch (the batch must divide by it)",
       "每个全局批次的微批次数（批大小须能被它整除）"},
      {"layers per FSDP unit (--fsdp-unit)", "每个 FSDP 单元的层数（--fsdp-unit）"},
      {"remove this configuration", "删除这个配置"},
      {"as a --compare item: %s", "写成 --compare 列表项：%s"},
      {"fold the configurations into one line", "把各配置折叠成一行"},
      {"show the configurations to edit them", "展开各配置以便编辑"},
      {"+ add", "+ 添加"},
      {"up to %d configurations", "最多 %d 个配置"},
      {"Run comparison", "运行对比"},
      {"runs each configuration in turn with the run bar's model, batch, steps, optimizer, "
       "seed and device\nthe same from the command line: --compare %s",
       "用运行栏的模型、批大小、步数、优化器、随机种子和设备依次运行每个配置\n"
       "在命令行中等价于：--compare %s"},
      {"Cancel", "取消"},
      {"configuration", "配置"},
      {"step here", "本机步时"},
      {"step on N", "N 台步时"},
      {"peak memory per rank", "各 rank 内存峰值"},
      {"sent/step", "每步发送"},
      {"idle here", "本机空闲"},
      {"bubble on N | formula", "N 台气泡 | 公式"},
      {"exposed on N", "N 台暴露通信"},
      {"final loss", "最终损失"},
      {"weights vs single", "与单卡权重之差"},
      {"the largest difference of a final weight from the 'single' row's (same model,\n"
       "seed, batch and steps): ~1e-7 is float32 reduction order; more means the\n"
       "strategy trained something else (BatchNorm over part of the batch, 2-byte\n"
       "types). Add single:1 to the list to compare with it.",
       "最终权重与 'single' 一行（同一模型、种子、批大小和步数）之间的最大差值：\n"
       "约 1e-7 只是 float32 规约顺序的差别；更大则说明该策略训练出了不同的结果\n"
       "（只对部分批次做 BatchNorm、2 字节类型）。在列表里加上 single:1 即可与之比较。"},
      {"median step time measured here (the slowest rank's, per step); with more ranks\n"
       "than cores, the ranks took turns and this measures that too",
       "在本机实测的每步时间中位数（每步取最慢 rank 的时间）；rank 多于 CPU 核时，\n"
       "各 rank 轮流占用核，这部分也计入实测值"},
      {"as on N dedicated devices (one per rank) joined by %s: each op costs the CPU\n"
       "time its thread used, each transfer the link's time ('shardlab project');\n"
       "rows of the same work share one table of op costs, so they differ by schedule",
       "按 N 台由 %s 连接的独立设备推算（每个 rank 一台）：每个算子耗时取其线程所用的\n"
       "CPU 时间，每次传输耗时取链路所需的时间（'shardlab project'）；\n"
       "计算内容相同的各行共用一张算子耗时表，因此它们的差别只来自调度"},
      {"each rank's peak, device pool, from its accounting allocator",
       "各 rank 设备内存池的峰值，来自其记账分配器"},
      {"bytes the busiest rank sends per training step", "发送最多的 rank 每个训练步发送的字节数"},
      {"as on N devices: the share of a step a rank waits for another to get there (a\n"
       "neighbour's activation or gradient, a late peer at a collective), mean over ranks;\n"
       "for pipelines beside the textbook (P-1)/(M+P-1), P stages and M micro-batches",
       "按 N 台设备推算：一步中某个 rank 等待其他 rank 赶上来的时间占比（等待相邻阶段的\n"
       "激活值或梯度，或在集合通信处等待迟到的 rank），对各 rank 取平均；\n"
       "流水线旁边列出教科书公式 (P-1)/(M+P-1)，P 为阶段数，M 为微批次数"},
      {"as on N devices: the share of a step a rank waits while bytes move",
       "按 N 台设备推算：一步中某个 rank 在等待数据传输的时间占比"},
      {"running\xE2\x80\xA6 step %d/%d", "正在运行\xE2\x80\xA6 第 %d/%d 步"},
      {"queued", "排队中"},
      {"not run: %s", "未运行：%s"},
      {"%s each", "每个 %s"},
      {"rank 0, 1, ...: %s", "rank 0, 1, ...：%s"},
      {"as on %d devices %.1f%% (measured here: idle %.1f%%); %s with P = %d, M = %d: "
       "%.1f%%",
       "按 %d 台设备推算 %.1f%%（本机实测：空闲 %.1f%%）；%s，P = %d，M = %d：%.1f%%"},
      {"the schedule's", "该调度的"},
      {"not a pipeline: waiting for peers at collectives (no formula)",
       "不是流水线：在集合通信处等待其他 rank（没有公式）"},
      {"From step", "起始步"},
      {"fit", "适配窗口"},
      {"Each run is drawn from the start of this step of its own, all on one time scale: a "
       "slower configuration is visibly longer. Step 0 pays first-touch costs, so it starts at "
       "step 1. fit: two steps of the slowest run. Wheel: zoom, drag: pan, hover: details.",
       "每次运行都从它自己的这一步开始画，所有运行共用一个时间刻度：较慢的配置明显更长。"
       "第 0 步要付出首次访问的开销，所以默认从第 1 步开始。适配窗口：显示最慢运行的两步。"
       "滚轮：缩放，拖动：平移，悬停：详情。"},
      {"(not finished yet)", "（尚未完成）"},
      {"(not run, see the table)", "（未运行，见表格）"},
      {"median step %.2f ms", "每步中位数 %.2f ms"},
      {"Device memory of", "设备内存："},
      {"the busiest rank", "峰值最高的 rank"},
      {"all ranks added up", "所有 rank 之和"},
      {"the busiest rank: the one with the highest peak in each run",
       "峰值最高的 rank：每次运行中内存峰值最高的那个 rank"},
      {"over steps", "步范围"},
      {"to %d", "至 %d"},
      {"Bytes in use on the device, measured by each rank's accounting allocator, drawn against "
       "the training step: x = step index + the fraction of that step elapsed, so every run's "
       "step k starts at the same x however long its steps take. Step s lasts from the first "
       "span any rank begins in it to the first span of step s + 1.",
       "设备上正在使用的字节数，由各 rank 的记账分配器实测，横轴是训练步："
       "x = 步序号 + 该步已过去的比例，因此无论每步耗时多长，每次运行的第 k 步都从同一个 x "
       "开始。第 s 步从任一 rank 在该步开始的第一个时间片算起，到第 s + 1 步的第一个时间片为止。"},
      {"%s (rank %d): peak %s", "%s（rank %d）：峰值 %s"},
      {"%s: peak %s", "%s：峰值 %s"},
      {"%s (no rank %d)", "%s（没有 rank %d）"},
      {"%s (no steps)", "%s（没有训练步）"},
      {"no finished run yet", "尚无已完成的运行"},
      {"step %d, %.0f%% through it", "第 %d 步，已过 %.0f%%"},
      {"Each rank's peak, by category at the moment of the peak (device)",
       "各 rank 的峰值，按峰值时刻的类别拆分（设备）"},
      {"Set up to %d configurations (strategy, world size, micro-batches and the options that "
       "strategy reads), then Run comparison: each runs in turn with the run bar's model, "
       "batch, steps and optimizer, and its row appears here as soon as it finishes.",
       "设置最多 %d 个配置（策略、world size、微批次数以及该策略读取的选项），然后点“运行对比”："
       "各配置依次用运行栏的模型、批大小、步数和优化器运行，每个一结束，它的行就出现在这里。"},
      // Configuration labels and the idle share (app/gui/logic/compare_logic.cpp).
      {"no-prefetch", "不预取"},
      {"no-overlap", "不重叠"},
      {"bucket %s MiB", "桶 %s MiB"},
      {"unit %s", "单元 %s"},
      {"schedule %s", "调度 %s"},
      {"no-reshard", "不重新分片"},
      {"%s processes", "%s 多进程"},
      {"idle share: for each step, the window from the first compute span any rank begins to "
       "the last one any rank ends; a rank's idle share is the part of that window in which "
       "its compute lane runs nothing (waiting for communication or for other ranks), "
       "averaged over steps 1.. and then over ranks. In a pipeline that idle time is the "
       "bubble, shown beside the textbook (P-1)/(M+P-1).",
       "空闲占比：每一步取从任一 rank 开始的第一个计算时间片到任一 rank 结束的最后一个计算时间片"
       "这段窗口；某个 rank 的空闲占比是该窗口中它的计算道什么都没运行的部分（在等待通信或"
       "其他 rank），先对第 1 步起的各步取平均，再对各 rank 取平均。在流水线中，这段空闲时间"
       "就是气泡，旁边列出教科书公式 (P-1)/(M+P-1)。"},
      {"idle share: the part of each step (first to last compute span over all ranks) in which "
       "a rank's compute lane runs nothing; mean over steps 1.. and ranks. In a pipeline it is "
       "the bubble.",
       "空闲占比：每一步（所有 rank 的第一个到最后一个计算时间片）中某个 rank 的计算道什么都"
       "没运行的部分；对第 1 步起的各步和各 rank 取平均。在流水线中它就是气泡。"},
      // The menu bar and the export window (app/gui/panel_export.cpp).
      {"no finished run to export yet (Run, then wait for it to finish)",
       "还没有可导出的已完成运行（先运行，并等它结束）"},
      {"trace written to %s (open it in ui.perfetto.dev)",
       "trace 已写入 %s（可在 ui.perfetto.dev 中打开）"},
      {"no comparison to export yet (Compare view, Run comparison)",
       "还没有可导出的对比（在“对比”视图中点“运行对比”）"},
      {"compare table written to %s", "对比表已写入 %s"},
      {"window saved to %s", "窗口已保存到 %s"},
      {"File", "文件"},
      {"Export trace JSON", "导出 trace JSON"},
      {"Save PNG of the window", "把窗口保存为 PNG"},
      {"Export compare table CSV", "导出对比表 CSV"},
      {"Export paths...", "导出路径……"},
      {"Quit", "退出"},
      {"View", "视图"},
      {"Presenter mode", "演示模式"},
      {"High contrast", "高对比度"},
      {"Larger font", "放大字体"},
      {"Smaller font", "缩小字体"},
      {"Lessons panel", "课程面板"},
      {"Help", "帮助"},
      {"Keyboard shortcuts", "键盘快捷键"},
      {"Export", "导出"},
      {"Write trace JSON", "写出 trace JSON"},
      {"Save window PNG", "保存窗口 PNG"},
      {"Write compare CSV", "写出对比 CSV"},
      {"The trace is Chrome Trace Event JSON: open it in ui.perfetto.dev or chrome://tracing.",
       "trace 文件是 Chrome Trace Event JSON：可在 ui.perfetto.dev 或 chrome://tracing 中打开。"},
      // The keyboard shortcuts (app/gui/panel_presenter.cpp).
      {"Run (or resume a paused run)", "运行（或继续已暂停的运行）"},
      {"Pause the training run at the next step boundary", "在下一个步边界暂停训练"},
      {"Step: run exactly one more training step", "单步：再运行一个训练步"},
      {"Play / pause the replay", "开始 / 暂停回放"},
      {"Previous / next event (span start or end, allocation)",
       "上一个 / 下一个事件（时间片的开始或结束、内存分配）"},
      {"The middle of the next collective (pieces in flight)",
       "跳到下一次集合通信的中途（可看到正在传输的数据块）"},
      {"Playhead to the start", "播放头回到开头"},
      {"Replay slower / faster", "回放减速 / 加速"},
      {"Timeline, Memory, Cluster, Camping trip, Compare, Loss",
       "时间线、内存、集群、露营之旅、对比、损失"},
      {"Fit all training steps in the timeline", "在时间线中显示全部训练步"},
      {"Presenter mode: full screen, high contrast, big font", "演示模式：全屏、高对比度、大字体"},
      {"High-contrast theme", "高对比度主题"},
      {"Larger / smaller font", "放大 / 缩小字体"},
      {"Export window", "导出窗口"},
      {"Lessons panel (beside the view)", "课程面板（在视图旁边）"},
      {"Lesson: run the step, reveal it, then the next step (a clicker's forward key)",
       "课程：运行本步、揭晓答案，然后进入下一步（翻页笔的前进键）"},
      {"Lesson: the previous step", "课程：上一步"},
      {"Lesson: run the step / reveal", "课程：运行本步 / 揭晓答案"},
      {"This help", "本帮助"},
      // An opened recording (app/gui/logic/recording_view.cpp).
      {"trace: %s \xE2\x80\x94 recorded on %s, world %d, %s",
       "trace：%s \xE2\x80\x94 录制于 %s，world %d，%s"},
      {"recording: %s \xE2\x80\x94 recorded on %s, world %d, %s",
       "录制：%s \xE2\x80\x94 录制于 %s，world %d，%s"},
      {"%s without --tf32", "%s，不加 --tf32"},
      {"flash attention", "flash 注意力"},
      {"Recorded on cuda; this machine has no usable GPU, so it is shown as recorded. It can be "
       "re-run here with %s.",
       "录制于 cuda；本机没有可用的 GPU，因此按录制内容显示。可以用 %s 在本机重新运行。"},
      {"Recorded on cuda (%s); this machine has no usable GPU, so it is shown as recorded. It "
       "can be re-run here with %s.",
       "录制于 cuda（%s）；本机没有可用的 GPU，因此按录制内容显示。可以用 %s 在本机重新运行。"},
      {"trace %s", "trace %s"},
      {"recording %s", "录制 %s"},
      {"recorded %s on %s", "录制于 %s，设备 %s"},
      {"CPU: %s", "CPU：%s"},
      {"GPU: %s", "GPU：%s"},
      {"placement: %s", "放置：%s"},
      {"written by %s", "由 %s 写入"},
      {"%zu processes, their clocks aligned to rank 0's at rendezvous",
       "%zu 个进程，它们的时钟在会合时对齐到 rank 0 的时钟"},
      {"A trace holds memory as totals per category (no buffer names) and no final weights.",
       "trace 文件只保存按类别汇总的内存（没有缓冲区名称），也不含最终权重。"},
      {"Shown as recorded: nothing runs until Run (R).",
       "按录制内容显示：按“运行 (R)”之前不会运行任何东西。"},
      // Presenter layout (panel_export.cpp's View menu, panel_presenter.cpp's help).
      {"Run bar", "运行栏"},
      {"Replay bar", "回放栏"},
      {"Slides: view and lesson only", "幻灯片：只显示视图和课程"},
      {"Slides: the view and the lesson only (F9 again for the menus and bars)",
       "幻灯片：只显示视图和课程（再按 F9 恢复菜单和工具栏）"},
  };
  return table;
}

}  // namespace shardlab::gui
