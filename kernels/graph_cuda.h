/*
 * graph_cuda.h - CUDA graphs for plain C (kernels/graph.cu): record the work
 * queued on one stream (stream capture), instantiate it once, replay it.
 *
 * What a replay repeats is what was queued during the capture, with the
 * arguments it was queued with: pointers are followed again at every replay,
 * values passed by value are frozen. So whatever changes between replays
 * (hyper-parameters, permutations) must reach the GPU through memory the
 * graph reads: a copy node from pinned host memory, or device memory.
 * Nothing may allocate, free or synchronise while a capture is open.
 *
 * The capture is thread-local (cudaStreamCaptureModeThreadLocal): other
 * threads of the process (another trainer, the host's loop) are not
 * disturbed and cannot invalidate it.
 */
#ifndef MR_GRAPH_CUDA_H
#define MR_GRAPH_CUDA_H
#include "errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef MOONRL_HAVE_CUDA
/* Opens a capture on stream: work queued on it from now on is recorded. */
mr_status mr_cuda_graph_begin(void *stream, mr_error *err);
/* Closes the capture and instantiates it into *exec (NULL on failure). With
 * discard set, the capture is closed and thrown away (after a failed queue
 * call inside it) and MR_OK returned. */
mr_status mr_cuda_graph_end(void *stream, int discard, void **exec, mr_error *err);
/* Queues one replay of exec on stream (asynchronous, as a kernel launch). */
mr_status mr_cuda_graph_launch(void *exec, void *stream, mr_error *err);
void mr_cuda_graph_destroy(void *exec);
#endif

#ifdef __cplusplus
}
#endif
#endif /* MR_GRAPH_CUDA_H */
