// Printing a run's summary as text or JSON, shared by `run` and `demo`.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "core/run/runner.h"

namespace shardlab::app {

std::string human_bytes(double bytes);  // "1.25 MiB"
nlohmann::json summary_json(const RunResult& r);
// One line when a CPU run's ranks outnumber `cores` (see core/comm/cores.h), else empty.
std::string oversubscription_line(const RunResult& r, int cores);
void print_summary(const RunResult& r);

// Family reports, printed after the common summary and merged into its JSON;
// each does nothing for strategies outside its family.
// Pipeline family (app/report_pipeline.cpp): bubble share, activations in flight.
void print_pipeline_report(const RunResult& r);
void pipeline_report_json(const RunResult& r, nlohmann::json& j);
// Data-parallel family (app/report_model_state.cpp): measured vs predicted model states and
// traffic.
void print_model_state_report(const RunResult& r);
void model_state_report_json(const RunResult& r, nlohmann::json& j);
// Parameter-server family (app/report_servers.cpp): traffic through servers and
// workers against its formula and all-reduce's, and the workers' staleness.
void print_server_report(const RunResult& r);
void server_report_json(const RunResult& r, nlohmann::json& j);

}  // namespace shardlab::app
