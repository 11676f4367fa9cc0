/* sim_build — the simulator's build id (see sim_build.h). */
#include "sim_build.h"

/* sim/module.mk always sets it; a compile outside make (clang-tidy) says
 * so rather than pretend to a hash. */
#ifndef SIM_BUILD_ID
#define SIM_BUILD_ID "src-sha256:unknown"
#endif

const char *sim_build_id(void)
{
    return SIM_BUILD_ID;
}
