// Chinese for the timeline, the replay bar, the loss view and shared formats
// (panel_timeline.cpp, logic/timeline_logic.cpp, panel_replay.cpp, logic/wait_logic.cpp, logic/format.cpp, panel_loss.cpp); see strings_zh.cpp for the conventions.
#include "app/gui/logic/strings_zh.h"

namespace shardlab::gui {

const StringPairs& strings_zh_timeline() {
  static const StringPairs table = {
  };
  return table;
}

}  // namespace shardlab::gui
