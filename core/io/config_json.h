// One JSON form of a run's settings (RunConfig): what recordings, traces'
// metadata and checkpoint manifests carry, written and read in one place. The
// strategy options come from their table (core/run_options.h), each under its
// row's key, so a new option is saved and loaded without a line here.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config.h"
#include "core/io/json_check.h"

namespace shardlab {

// Every setting a run was made with; gpt-only ones (seq, data, attention) and
// tf32 only when set.
nlohmann::json config_json(const RunConfig& c);

// The settings at `where` in a checked file: each key must be one config_json
// writes and have its type and range; `required` ones must be there, the rest
// take RunConfig's default when absent (files older than the key). Device and
// backend must be names shardlab knows; whether the whole fits together is
// validate()'s question (core/parallel/strategy.h), for the caller to ask.
// Throws ConfigError (one line, through `ck`).
RunConfig config_from_json(const JsonChecker& ck, const nlohmann::json& j, const std::string& where,
                           const std::vector<const char*>& required);

}  // namespace shardlab
