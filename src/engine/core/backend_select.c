/*
 * backend_select.c - the one place core names a backend: the table a device
 * number means, and the host's. Everything else in core goes through
 * mr_backend's operations (core/interface/backend.h), so a third backend is
 * a table and a line here.
 */
#include "backend.h"

const mr_backend *mr_backend_for(int device) {
    return device == MR_DEVICE_CUDA ? mr_backend_cuda() : mr_backend_cpu();
}

/* The host copy of the network (initialisation, checkpoints, evaluation,
 * inference) runs on the cpu backend whatever trains. */
const mr_backend *mr_backend_host(void) { return mr_backend_cpu(); }
