// `shardlab gui`: the desktop app, or with --screenshot a headless render to PNG.
#pragma once

namespace shardlab::app {

// Returns the exit code: 0 ok, 1 no display or a failed run, 2 bad input.
int cmd_gui(int argc, char** argv);

}  // namespace shardlab::app
