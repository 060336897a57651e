// The Chinese for every string the app's views show, keyed by the English.
// Terms follow the lessons' glossary: rank, all-reduce (全规约), all-gather
// (全收集), reduce-scatter (规约散射), micro-batch (微批次), bubble (气泡).
// Metric names, units, strategy names and command lines stay as they are.
// A printf conversion (%d, %.2f, %s) appears in the same order in both.
#include "app/gui/logic/i18n.h"
#include "app/gui/logic/strings_zh.h"

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
      {"Step", "步骤"},
      {"of", "/"},
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
      {"right", "正确"},
      {"not quite", "不太对"},
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
  };
  return table;
}

}  // namespace shardlab::gui
