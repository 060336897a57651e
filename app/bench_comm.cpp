// `shardlab bench comm`: collective bandwidth table (placeholder until implemented).
#include "app/commands.h"
int shardlab::app::cmd_bench(int, char**) { return 0; }
