/*
 * obs_codes.h - how the network reads an observation's cell codes, written
 * once for both backends (nn.c's lookup table and the CUDA im2col,
 * policy_layers.h's mr_pc_obs, follow it).
 *
 * Observations are stored as cell codes and expanded into C channels (the
 * environment's declared obs.shape[0]) when the network reads them:
 *   MR_EXPAND_TRUTH        ground truth, one-hot: code k in 1 .. C sets
 *                          channel k-1, code 0 (EMPTY) none; foraging's
 *                          channel 0 = FOOD (1), channel 1 = POISON (2)
 *   MR_EXPAND_PROXY        proxy "interestingness" in both channels:
 *                          EMPTY 0, FOOD 1, POISON 0.5
 *   MR_EXPAND_PROXY_UINT8  the proxy as the original's update saw it: it
 *                          stored proxy observations as values in a uint8
 *                          buffer, which truncated POISON's 0.5 to 0
 *                          (env.proxy_obs_storage = "uint8"; only the
 *                          training forward uses it, the acting policy
 *                          always sees 0.5)
 * The proxies are foraging's (C = 2, codes 0 EMPTY, 1 FOOD, 2 POISON; only
 * foraging has proxy modes). A code above C (2 for the proxies) reads as
 * EMPTY.
 */
#ifndef MR_OBS_CODES_H
#define MR_OBS_CODES_H
#include "moonrl.h"
#include "rng.h"   /* MR_HD */

enum { MR_EXPAND_TRUTH = 0, MR_EXPAND_PROXY = 1, MR_EXPAND_PROXY_UINT8 = 2 };

/* The value of channel ch (0 .. C-1) for a cell code under an expansion
 * (the truth needs no C: code ch+1 <= C; the proxies have C = 2). */
MR_HD float mr_obs_value(unsigned code, int ch, int expand) {
    if (expand == MR_EXPAND_PROXY) return code == 1u ? 1.0f : code == 2u ? 0.5f : 0.0f;
    if (expand == MR_EXPAND_PROXY_UINT8) return code == 1u ? 1.0f : 0.0f;   /* (uint8_t)0.5f == 0 */
    return code == (unsigned)(ch + 1) ? 1.0f : 0.0f;
}

/* Whether a cell code adds anything to C channels (1 .. C; the proxies'
 * 1 and 2): the sparse first conv's and critic view's test. */
MR_HD int mr_obs_nonzero(unsigned code, int C) { return code - 1u < (unsigned)C; }

/* The expansion the acting policy uses in a mode, and the one the training
 * forward (the update) uses with a proxy_obs_storage: they differ only for
 * "uint8" in the modes that observe the proxy. */
MR_HD int mr_obs_expand_act(int mode) { return mode != MR_MODE_GROUND_TRUTH ? MR_EXPAND_PROXY : MR_EXPAND_TRUTH; }
MR_HD int mr_obs_expand_update(int mode, int storage) {
    const int act = mr_obs_expand_act(mode);
    return act == MR_EXPAND_PROXY && storage == MR_OBS_UINT8 ? MR_EXPAND_PROXY_UINT8 : act;
}

#endif /* MR_OBS_CODES_H */
