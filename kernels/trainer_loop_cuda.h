/*
 * trainer_loop_cuda.h - the CUDA launchers of the trainer loop's glue steps
 * (kernels/trainer_loop.cu) over trainer_loop_math.h's elements, and the
 * few CUDA runtime calls plain C needs (device, events).
 */
#ifndef MR_TRAINER_LOOP_CUDA_H
#define MR_TRAINER_LOOP_CUDA_H
#include "trainer_loop_math.h"

/* ------------------------------------------------------------------ CUDA */

#ifdef __cplusplus
extern "C" {
#endif

#ifdef MOONRL_HAVE_CUDA
/* Every pointer is device memory unless it says host; streams are void *
 * (cudaStream_t). Arguments are checked before any launch (MR_ERR_ARG);
 * kernel faults surface at the next synchronisation. */

/* s: the environments (device pointers); extra (N,2); u (N) or NULL. */
mr_status mr_cuda_loop_step_in(const mr_env_state *s, uint64_t seed, float *extra, float *u, void *stream,
                               mr_error *err);
/* value (N) raw -> val (N) with PopArt from d_pa; rew (N) and done (N), both
 * or neither (NULL: the bootstrap value only). */
mr_status mr_cuda_loop_step_out(const mr_env_state *s, const mr_popart_ctl *d_pa, const float *value, float *val,
                                float *rew, uint8_t *done, void *stream, mr_error *err);
/* ppo.truncation = bootstrap: f (host struct, device buffers), trainer_loop_math.h's mr_loop_final_args;
 * keep_final after a step's env step (rows from row0), add_final once per rollout (rew (T, N)). */
mr_status mr_cuda_loop_keep_final(const mr_env_state *s, const mr_loop_final_args *f, int row0, void *stream,
                                  mr_error *err);
mr_status mr_cuda_loop_add_final(const mr_loop_final_args *f, const mr_popart_ctl *d_pa, float gamma, float *rew,
                                 void *stream, mr_error *err);
/* One minibatch (a holds device pointers; read on the host only for the
 * launch), PopArt from d_pa. */
mr_status mr_cuda_loop_gather(const mr_loop_gather_args *a, const mr_popart_ctl *d_pa, void *stream, mr_error *err);
/* out (n) = a - b. */
mr_status mr_cuda_loop_diff(const float *a, const float *b, float *out, int64_t n, void *stream, mr_error *err);
mr_status mr_cuda_loop_accumulate(mr_loop_metrics *d_m, const mr_lossctl *d_loss, const mr_optctl *d_opt, int ngroups,
                                  void *stream, mr_error *err);
mr_status mr_cuda_loop_finish(mr_loop_metrics *d_m, const mr_popart_ctl *d_pa, const mr_optctl *d_opt, void *stream,
                              mr_error *err);

/* Runtime helpers for C. */
mr_status mr_cuda_set_device(int device, mr_error *err);
/* The GPU's name into buf (host), e.g. "NVIDIA H100 80GB HBM3". */
mr_status mr_cuda_device_name(int device, char *buf, size_t len, mr_error *err);
/* Timing events (cudaEventDefault). */
mr_status mr_cuda_event_create(void **ev, mr_error *err);
void mr_cuda_event_destroy(void *ev);
mr_status mr_cuda_event_record(void *ev, void *stream, mr_error *err);
/* Waits for the event; reports earlier asynchronous failures. */
mr_status mr_cuda_event_sync(void *ev, mr_error *err);
/* Milliseconds from a to b, both completed. */
mr_status mr_cuda_event_elapsed(void *a, void *b, float *ms, mr_error *err);
#endif

#ifdef __cplusplus
}
#endif
#endif /* MR_TRAINER_LOOP_CUDA_H */
