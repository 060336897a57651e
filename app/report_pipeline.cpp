// Pipeline-family report (bubble share, activations in flight): filled in with the pipeline
// strategies.
#include "app/summary.h"

namespace shardlab::app {

void print_pipeline_report(const RunResult&) {}
void pipeline_report_json(const RunResult&, nlohmann::json&) {}

}  // namespace shardlab::app
