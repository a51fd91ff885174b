/*
 * no_cuda_build.c - the engine as a machine without the CUDA toolkit
 * builds it (MOONRL_CUDA=AUTO finds no nvcc): the kernels/ C files compiled without
 * MOONRL_HAVE_CUDA, no .cu, linked with every other object (CMakeLists.txt,
 * test_no_cuda_build; only a CUDA build needs the check, a build without
 * CUDA is it). A call to a CUDA-only declaration from those files fails its
 * compile (-Werror=implicit-function-declaration) or this link; running it
 * checks that the cuda backend says it is not there, a config plans its
 * device memory without CUDA, and a CPU trainer still trains.
 */
#include "check.h"
#include "backend.h"
#include "moonrl.h"

#include <string.h>

int main(void) {
    const mr_backend *cuda = mr_backend_for(MR_DEVICE_CUDA);
    CHECK(cuda && cuda->unavailable && strstr(cuda->unavailable, "this build has no CUDA backend"));
    mr_config cfg;
    mr_config_default(&cfg);
    cfg.env.num_envs = 8;
    cfg.ppo.rollout_steps = 8;
    cfg.total_steps = 64;
    cfg.device = MR_DEVICE_CPU;
    mr_trainer *t = NULL;
    mr_error err;
    CHECK_MSG(mr_trainer_create(&cfg, &t, &err) == MR_OK, "%s", err.msg);
    if (t) {
        CHECK_MSG(mr_trainer_update(t, NULL, &err) == MR_OK, "%s", err.msg);
        mr_trainer_free(t);
    }
    cfg.device = MR_DEVICE_CUDA;
    CHECK(mr_trainer_create(&cfg, &t, &err) != MR_OK && strstr(err.msg, "no CUDA backend"));
    return check_report("test_no_cuda_build");
}
