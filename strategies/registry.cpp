// The table of built-in strategies, registered by one explicit call from each
// program's main() instead of by static initialisers in every file.
#include "strategies/registry.h"

#include <mutex>

namespace shardlab {

namespace {

// In the order --help, the menus and the messages list them ("used by gpipe, 1f1b").
constexpr StrategyInfo (*const kBuiltin[])() = {
    ddp_strategy,      dp_strategy,          fsdp_strategy,  gpipe_strategy,
    naive_mp_strategy, one_f_one_b_strategy, zb_h1_strategy, interleaved_strategy,
    ps_strategy,       single_strategy,      zero1_strategy, zero2_strategy,
    zero3_strategy,
};

}  // namespace

void register_builtin_strategies() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (StrategyInfo (*entry)() : kBuiltin) register_strategy(entry());
  });
}

}  // namespace shardlab
