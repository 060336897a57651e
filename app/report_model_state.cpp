// Data-parallel-family report (measured vs predicted model states and traffic): filled in with
// ZeRO/FSDP.
#include "app/summary.h"

namespace shardlab::app {

void print_model_state_report(const RunResult&) {}
void model_state_report_json(const RunResult&, nlohmann::json&) {}

}  // namespace shardlab::app
