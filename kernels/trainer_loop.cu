/*
 * trainer_loop.cu - the CUDA trainer's glue kernels (see
 * trainer_loop_cuda.h): the launches around trainer_loop_math.h's MR_HD
 * element functions, and the CUDA runtime calls plain C needs (device selection, timing events).
 *
 * Tensors (device memory; N environments, M minibatch samples, VV cells):
 *   step_in    one thread per environment: extra (N,2), u (N)
 *   step_out   one thread per environment: val, rew (N) f32, done (N) u8
 *   keep_final one thread per environment: a truncated one's final state into its slot
 *   add_final  grid-stride over the kf * N slots: rew[row] += gamma V (each row at most one slot)
 *   gather     grid-stride over M*VV observation bytes; threads j < M also
 *              copy row j's scalars (7 values)
 *   diff       grid-stride over n
 *   accumulate, finish   one thread each (a few dozen scalars)
 * Nothing here is reduced across threads, so nothing depends on scheduling.
 */
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "registry.h"   /* before the extern "C" blocks: MR_HD inline functions (the critic's inputs) */
#include "cuda_check.h"
#include "trainer_loop_cuda.h"

#define THREADS 128
#define MAX_BLOCKS 4096   /* grid-stride kernels: enough to fill any current GPU */

static unsigned grid_for(long long n) {
    const long long b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < MAX_BLOCKS ? (b > 0 ? b : 1) : MAX_BLOCKS);
}

/* ---------------------------------------------------------------- kernels */

__global__ void __launch_bounds__(THREADS)
loop_step_in_kernel(const __grid_constant__ mr_env_state s, uint64_t seed, float *__restrict__ extra,
                    float *__restrict__ u) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= s.n) return;
    mr_env_critic_extra_one(&s, i, extra + (size_t)i * MR_ENV_EXTRA_STRIDE);
    mr_loop_step_in(&s, i, seed, u);
}

__global__ void __launch_bounds__(THREADS)
loop_step_out_kernel(const __grid_constant__ mr_env_state s, const mr_popart_ctl *__restrict__ pa,
                     const float *__restrict__ value, float *__restrict__ val, float *__restrict__ rew,
                     uint8_t *__restrict__ done) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= s.n) return;
    float pm, ps, inv;
    mr_loop_popart_floats(pa, &pm, &ps, &inv);
    mr_loop_step_out(&s, i, pm, ps, value, val, rew, done);
}

__global__ void __launch_bounds__(THREADS)
loop_keep_final_kernel(const __grid_constant__ mr_env_state s, const __grid_constant__ mr_loop_final_args f,
                       int row0) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < s.n) mr_loop_keep_final(&s, i, &f, row0);
}

__global__ void __launch_bounds__(THREADS)
loop_add_final_kernel(const __grid_constant__ mr_loop_final_args f, const mr_popart_ctl *__restrict__ pa, float gamma,
                      float *__restrict__ rew) {
    float pm, ps, inv;
    mr_loop_popart_floats(pa, &pm, &ps, &inv);
    const int64_t K = (int64_t)f.kf * f.N, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < K; j += stride)
        mr_loop_add_final(&f, j, pm, ps, gamma, rew);
}

__global__ void __launch_bounds__(THREADS)
loop_gather_kernel(const __grid_constant__ mr_loop_gather_args g, const mr_popart_ctl *__restrict__ pa) {
    float pm, ps, inv;
    mr_loop_popart_floats(pa, &pm, &ps, &inv);
    const int64_t n = (int64_t)g.M * g.VV, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride) {
        mr_loop_gather_obs(&g, j);
        if (j < g.M) mr_loop_gather_row(&g, (int)j, pm, inv);
    }
}

__global__ void __launch_bounds__(THREADS)
loop_diff_kernel(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ out, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = a[i] - b[i];
}

__global__ void loop_accumulate_kernel(mr_loop_metrics *m, const mr_lossctl *l, const mr_optctl *o, int ngroups) {
    mr_loop_accumulate(m, l, o, ngroups);
}

__global__ void loop_finish_kernel(mr_loop_metrics *m, const mr_popart_ctl *pa, const mr_optctl *o) {
    mr_loop_finish(m, pa, o);
}

/* ------------------------------------------------------------ launches */

static mr_status check_env(const mr_env_state *s, const char *who, mr_error *err) {
    if (!s || s->n < 1 || !s->tick || !s->reward || !s->terminated || !s->truncated)
        return mr_fail(err, MR_ERR_ARG, "%s: the environments are missing or not laid out (n >= 1, device "
                       "pointers from mr_env_layout)", who);
    return MR_OK;
}

extern "C" mr_status mr_cuda_loop_step_in(const mr_env_state *s, uint64_t seed, float *extra, float *u, void *stream,
                                          mr_error *err) {
    const char *who = "mr_cuda_loop_step_in";
    mr_status st = check_env(s, who, err);
    if (st != MR_OK) return st;
    MR_CUDA_NEED(extra, who, "extra");
    loop_step_in_kernel<<<mr_cuda_blocks(s->n, THREADS), THREADS, 0, (cudaStream_t)stream>>>(*s, seed, extra, u);
    MR_CUDA_LAUNCHED("the rollout step-input kernel", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_loop_step_out(const mr_env_state *s, const mr_popart_ctl *d_pa, const float *value,
                                           float *val, float *rew, uint8_t *done, void *stream, mr_error *err) {
    const char *who = "mr_cuda_loop_step_out";
    mr_status st = check_env(s, who, err);
    if (st != MR_OK) return st;
    MR_CUDA_NEED(d_pa, who, "d_pa");
    MR_CUDA_NEED(value, who, "value");
    MR_CUDA_NEED(val, who, "val");
    if (!rew != !done) return mr_fail(err, MR_ERR_ARG, "%s: rew and done go together (both or neither)", who);
    loop_step_out_kernel<<<mr_cuda_blocks(s->n, THREADS), THREADS, 0, (cudaStream_t)stream>>>(*s, d_pa, value, val,
                                                                                           rew, done);
    MR_CUDA_LAUNCHED("the rollout step-output kernel", err);
    mr_ok(err);
    return MR_OK;
}

static mr_status check_final(const mr_loop_final_args *f, const char *who, mr_error *err) {
    if (!f || f->N < 1 || f->kf < 1 || f->row_bytes < 1 || !f->count || !f->obs || !f->extra || !f->row || !f->value)
        return mr_fail(err, MR_ERR_ARG, "%s: the final-state slots are missing or empty (N, kf, row_bytes >= 1; "
                       "device buffers)", who);
    return MR_OK;
}

extern "C" mr_status mr_cuda_loop_keep_final(const mr_env_state *s, const mr_loop_final_args *f, int row0, void *stream,
                                             mr_error *err) {
    const char *who = "mr_cuda_loop_keep_final";
    mr_status st = check_env(s, who, err);
    if (st == MR_OK) st = check_final(f, who, err);
    if (st != MR_OK) return st;
    if (!s->final_obs || !s->final_extra || f->N != s->n)
        return mr_fail(err, MR_ERR_ARG, "%s: the environments keep no final states, or are not the slots' N", who);
    loop_keep_final_kernel<<<mr_cuda_blocks(s->n, THREADS), THREADS, 0, (cudaStream_t)stream>>>(*s, *f, row0);
    MR_CUDA_LAUNCHED("the rollout final-state kernel", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_loop_add_final(const mr_loop_final_args *f, const mr_popart_ctl *d_pa, float gamma,
                                            float *rew, void *stream, mr_error *err) {
    const char *who = "mr_cuda_loop_add_final";
    mr_status st = check_final(f, who, err);
    if (st != MR_OK) return st;
    MR_CUDA_NEED(d_pa, who, "d_pa");
    MR_CUDA_NEED(rew, who, "rew");
    loop_add_final_kernel<<<grid_for((long long)f->kf * f->N), THREADS, 0, (cudaStream_t)stream>>>(*f, d_pa, gamma,
                                                                                                   rew);
    MR_CUDA_LAUNCHED("the rollout truncation-bootstrap kernel", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_loop_gather(const mr_loop_gather_args *a, const mr_popart_ctl *d_pa, void *stream,
                                         mr_error *err) {
    const char *who = "mr_cuda_loop_gather";
    if (!a) return mr_fail(err, MR_ERR_ARG, "%s: the arguments are missing", who);
    if (a->M < 0 || a->VV < 1)
        return mr_fail(err, MR_ERR_ARG, "%s: M = %d, VV = %d: accepted M >= 0, VV >= 1", who, a->M, a->VV);
    if (a->M == 0) { mr_ok(err); return MR_OK; }
    MR_CUDA_NEED(d_pa, who, "d_pa");
    if (!a->idx || !a->obs || !a->act || !a->extra || !a->logp || !a->val || !a->adv || !a->ret || !a->mb_obs ||
        !a->mb_act || !a->mb_extra || !a->mb_logp || !a->mb_adv || !a->mb_oldv || !a->mb_target)
        return mr_fail(err, MR_ERR_ARG, "%s: a rollout or minibatch pointer is NULL", who);
    loop_gather_kernel<<<grid_for((long long)a->M * a->VV), THREADS, 0, (cudaStream_t)stream>>>(*a, d_pa);
    MR_CUDA_LAUNCHED("the minibatch gather kernel", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_loop_diff(const float *a, const float *b, float *out, int64_t n, void *stream,
                                       mr_error *err) {
    const char *who = "mr_cuda_loop_diff";
    if (n < 0) return mr_fail(err, MR_ERR_ARG, "%s: n = %lld: accepted 0 or more", who, (long long)n);
    if (n == 0) { mr_ok(err); return MR_OK; }
    MR_CUDA_NEED(a, who, "a");
    MR_CUDA_NEED(b, who, "b");
    MR_CUDA_NEED(out, who, "out");
    loop_diff_kernel<<<grid_for(n), THREADS, 0, (cudaStream_t)stream>>>(a, b, out, n);
    MR_CUDA_LAUNCHED("the difference kernel", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_loop_accumulate(mr_loop_metrics *d_m, const mr_lossctl *d_loss, const mr_optctl *d_opt,
                                             int ngroups, void *stream, mr_error *err) {
    const char *who = "mr_cuda_loop_accumulate";
    MR_CUDA_NEED(d_m, who, "d_m");
    MR_CUDA_NEED(d_loss, who, "d_loss");
    MR_CUDA_NEED(d_opt, who, "d_opt");
    if (ngroups < 1 || ngroups > MR_OPT_MAX_GROUPS)
        return mr_fail(err, MR_ERR_ARG, "%s: ngroups = %d: accepted 1 .. %d", who, ngroups, MR_OPT_MAX_GROUPS);
    loop_accumulate_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(d_m, d_loss, d_opt, ngroups);
    MR_CUDA_LAUNCHED("the metrics accumulation kernel", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_loop_finish(mr_loop_metrics *d_m, const mr_popart_ctl *d_pa, const mr_optctl *d_opt,
                                         void *stream, mr_error *err) {
    const char *who = "mr_cuda_loop_finish";
    MR_CUDA_NEED(d_m, who, "d_m");
    MR_CUDA_NEED(d_pa, who, "d_pa");
    MR_CUDA_NEED(d_opt, who, "d_opt");
    loop_finish_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(d_m, d_pa, d_opt);
    MR_CUDA_LAUNCHED("the metrics kernel", err);
    mr_ok(err);
    return MR_OK;
}

/* ------------------------------------------------------ runtime helpers */

extern "C" mr_status mr_cuda_set_device(int device, mr_error *err) {
    char what[64];
    snprintf(what, sizeof what, "cudaSetDevice(%d)", device);
    MR_CUDA_TRY(cudaSetDevice(device), what, err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_device_name(int device, char *buf, size_t len, mr_error *err) {
    if (!buf || len == 0) return mr_fail(err, MR_ERR_ARG, "mr_cuda_device_name: no buffer");
    cudaDeviceProp p;
    MR_CUDA_TRY(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties", err);
    snprintf(buf, len, "%s", p.name);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_event_create(void **ev, mr_error *err) {
    if (!ev) return mr_fail(err, MR_ERR_ARG, "mr_cuda_event_create: ev is NULL");
    cudaEvent_t e = NULL;
    *ev = NULL;
    MR_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDefault), "cudaEventCreateWithFlags", err);
    *ev = (void *)e;
    mr_ok(err);
    return MR_OK;
}

extern "C" void mr_cuda_event_destroy(void *ev) {
    if (ev && cudaEventDestroy((cudaEvent_t)ev) != cudaSuccess) (void)cudaGetLastError();
}

extern "C" mr_status mr_cuda_event_record(void *ev, void *stream, mr_error *err) {
    MR_CUDA_TRY(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream), "cudaEventRecord", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_event_sync(void *ev, mr_error *err) {
    MR_CUDA_TRY(cudaEventSynchronize((cudaEvent_t)ev), "the GPU work of this update", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_event_elapsed(void *a, void *b, float *ms, mr_error *err) {
    MR_CUDA_TRY(cudaEventElapsedTime(ms, (cudaEvent_t)a, (cudaEvent_t)b), "cudaEventElapsedTime", err);
    mr_ok(err);
    return MR_OK;
}
