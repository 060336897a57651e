// Chinese for the compare view, the export window, presenter settings and recordings
// (panel_compare.cpp, logic/compare_logic.cpp, panel_export.cpp, panel_presenter.cpp, logic/recording_view.cpp); see strings_zh.cpp for the conventions.
#include "app/gui/logic/strings_zh.h"

namespace shardlab::gui {

const StringPairs& strings_zh_compare() {
  static const StringPairs table = {
  };
  return table;
}

}  // namespace shardlab::gui
