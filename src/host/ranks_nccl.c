/*
 * ranks_nccl.c - the gradient's average of GPU ranks on NCCL
 * (docs/data-parallel.md), compiled where the CUDA toolkit has NCCL and
 * Open MPI is installed (host.cmake: MOONRL_HAVE_NCCL).
 *
 * One GPU per rank: each rank's trainer runs on device (local rank modulo
 * the devices the engine sees; host_ranks_threads sets cuda.device_index). The
 * communicator is made at a run's start from rank 0's unique id, broadcast
 * over MPI; the engine hands the reducer its device gradient and its stream
 * (mr_reducer.average), and ncclAllReduce with ncclAvg replaces it there, in
 * fp32 (the master gradient), queued on that stream. The statistics (a few
 * doubles in host memory) stay on MPI.
 *
 * Not yet run on a GPU: compiled in CI so it cannot rot; the first GPU
 * session runs its smoke test (bench/gpu_session.sh).
 */
#include "host.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>   /* types only: the binary links neither CUDA nor NCCL */
#include <mpi.h>
#include <nccl.h>

/* NCCL is loaded when a run of GPU ranks starts (dlopen), so the binary
 * starts without it: a CPU run, or a copy of the binary on a machine whose
 * NCCL is elsewhere (PyTorch's wheel brings one; LD_LIBRARY_PATH finds it). */
static struct {
    void *lib;
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*destroy)(ncclComm_t);
    const char *(*error_string)(ncclResult_t);
} N;
static ncclComm_t g_comm;
static int g_open;

static int load(char *msg, size_t n) {
    if (N.lib) return 0;
    const char *names[] = {"libnccl.so.2", "libnccl.so", NULL};
    for (int i = 0; names[i] && !N.lib; i++) N.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
#ifdef MR_NCCL_LIBDIR
    if (!N.lib) N.lib = dlopen(MR_NCCL_LIBDIR "/libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
#endif
    if (!N.lib) {
        snprintf(msg, n, "cannot load NCCL (libnccl.so.2: %s): GPU ranks need it; put its folder on "
                 "LD_LIBRARY_PATH", dlerror());
        return -1;
    }
    *(void **)&N.get_unique_id = dlsym(N.lib, "ncclGetUniqueId");
    *(void **)&N.init_rank = dlsym(N.lib, "ncclCommInitRank");
    *(void **)&N.all_reduce = dlsym(N.lib, "ncclAllReduce");
    *(void **)&N.destroy = dlsym(N.lib, "ncclCommDestroy");
    *(void **)&N.error_string = dlsym(N.lib, "ncclGetErrorString");
    if (!N.get_unique_id || !N.init_rank || !N.all_reduce || !N.destroy || !N.error_string) {
        snprintf(msg, n, "the NCCL loaded lacks ncclGetUniqueId, ncclCommInitRank, ncclAllReduce, "
                 "ncclCommDestroy or ncclGetErrorString");
        dlclose(N.lib);
        memset(&N, 0, sizeof N);
        return -1;
    }
    return 0;
}

int host_nccl_open(int rank, int size, char *msg, size_t n) {
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    int ok = load(msg, n) == 0, all = 0;
    /* every rank must have it before any waits in ncclCommInitRank */
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
        if (ok) snprintf(msg, n, "another rank cannot load NCCL");
        return -1;
    }
    if (rank == 0) {
        ncclResult_t r = N.get_unique_id(&id);
        if (r != ncclSuccess) snprintf(msg, n, "ncclGetUniqueId failed: %s", N.error_string(r));
    }
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclResult_t r = N.init_rank(&g_comm, size, id, rank);
    if (r != ncclSuccess) {
        snprintf(msg, n, "ncclCommInitRank (rank %d of %d) failed: %s", rank, size, N.error_string(r));
        return -1;
    }
    g_open = 1;
    return 0;
}

mr_status host_nccl_average(void *ctx, float *g, uint64_t n, void *stream, mr_error *err) {
    (void)ctx;
    ncclResult_t r = N.all_reduce(g, g, (size_t)n, ncclFloat, ncclAvg, g_comm, (cudaStream_t)stream);
    if (r != ncclSuccess) {
        err->status = MR_ERR_BACKEND;
        snprintf(err->msg, sizeof err->msg, "ncclAllReduce of the gradient failed: %s", N.error_string(r));
        return MR_ERR_BACKEND;
    }
    return MR_OK;
}

void host_nccl_close(void) {
    if (g_open) N.destroy(g_comm);
    g_open = 0;
}
