// The float and 2-byte instances of the CPU flash attention (kernels/
// flash_attention.h), compiled with the kernels' flags.
#include "kernels/flash_attention.h"

namespace shardlab::kernels {

SHARDLAB_FLASH_ATTENTION_KERNELS(, float)
SHARDLAB_FLASH_ATTENTION_KERNELS(, bf16)
SHARDLAB_FLASH_ATTENTION_KERNELS(, fp16)

}  // namespace shardlab::kernels
