// The parts of the Chinese string table, one per group of views (each in its
// own strings_zh_*.cpp); string_table() lists them all.
#pragma once

#include <utility>
#include <vector>

namespace shardlab::gui {

using StringPairs = std::vector<std::pair<const char*, const char*>>;

const StringPairs& strings_zh_app();       // run bar, menus, status, lessons panel
const StringPairs& strings_zh_timeline();  // timeline, replay bar, loss, formats
const StringPairs& strings_zh_cluster();   // cluster, camping, memory, buffer names, palette
const StringPairs& strings_zh_compare();   // compare, export, presenter, recordings

}  // namespace shardlab::gui
