// Printing a run's summary as text or JSON, shared by `run` and `demo`.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "core/runner.h"

namespace shardlab::app {

std::string human_bytes(double bytes);  // "1.25 MiB"
nlohmann::json summary_json(const RunResult& r);
void print_summary(const RunResult& r);

}  // namespace shardlab::app
