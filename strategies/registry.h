// The built-in strategies: each file's entry function (what the strategy is
// and how to make one), and the one call that registers them all.
#pragma once
#include "core/parallel/strategy.h"

namespace shardlab {

StrategyInfo single_strategy();
StrategyInfo ddp_strategy();
StrategyInfo dp_strategy();
StrategyInfo zero1_strategy();
StrategyInfo zero2_strategy();
StrategyInfo zero3_strategy();
StrategyInfo fsdp_strategy();
StrategyInfo naive_mp_strategy();
StrategyInfo gpipe_strategy();
StrategyInfo one_f_one_b_strategy();
StrategyInfo zb_h1_strategy();
StrategyInfo interleaved_strategy();
StrategyInfo ps_strategy();

// Registers every built-in strategy with core's registry (core/parallel/strategy.h).
// Every program calls it once at start-up, before it looks a strategy up;
// calling it again does nothing.
void register_builtin_strategies();

}  // namespace shardlab
