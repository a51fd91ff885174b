/*
 * graph.cu - stream capture into a CUDA graph and its replay (graph_cuda.h).
 * The CUDA trainer records one whole update (rollout, GAE, epochs, metrics:
 * a few thousand kernels) after its warm-up and replays it, so an update
 * costs one launch instead of one per kernel.
 */
#include <cuda_runtime.h>
#include <stddef.h>

#include "cuda_check.h"
#include "graph_cuda.h"

extern "C" mr_status mr_cuda_graph_begin(void *stream, mr_error *err) {
    if (!stream) return mr_fail(err, MR_ERR_ARG, "mr_cuda_graph_begin: a stream of its own is needed (not the default stream)");
    MR_CUDA_TRY(cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeThreadLocal),
                "cudaStreamBeginCapture (recording the update into a CUDA graph)", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_graph_end(void *stream, int discard, void **exec, mr_error *err) {
    if (exec) *exec = NULL;
    cudaGraph_t g = NULL;
    const cudaError_t e = cudaStreamEndCapture((cudaStream_t)stream, &g);
    if (discard) {
        if (g) (void)cudaGraphDestroy(g);
        (void)cudaGetLastError();
        mr_ok(err);
        return MR_OK;
    }
    if (!exec) {
        if (g) (void)cudaGraphDestroy(g);
        return mr_fail(err, MR_ERR_ARG, "mr_cuda_graph_end: exec is NULL");
    }
    MR_CUDA_TRY(e, "cudaStreamEndCapture (something in the update cannot be recorded into a CUDA graph)", err);
    cudaGraphExec_t x = NULL;
    const cudaError_t ei = cudaGraphInstantiateWithFlags(&x, g, 0);
    (void)cudaGraphDestroy(g);
    MR_CUDA_TRY(ei, "cudaGraphInstantiateWithFlags (the recorded update)", err);
    *exec = (void *)x;
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_graph_launch(void *exec, void *stream, mr_error *err) {
    if (!exec) return mr_fail(err, MR_ERR_ARG, "mr_cuda_graph_launch: no graph");
    MR_CUDA_TRY(cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)stream), "cudaGraphLaunch (the recorded update)",
                err);
    mr_ok(err);
    return MR_OK;
}

extern "C" void mr_cuda_graph_destroy(void *exec) {
    if (exec && cudaGraphExecDestroy((cudaGraphExec_t)exec) != cudaSuccess) (void)cudaGetLastError();
}
