/*
 * minimal.c - driving the engine from C: train a small ground-truth agent on
 * the CPU, checkpoint it, and print its evaluation row. Built with the project
 * (build/minimal); the same calls are what the Lua host makes.
 */
#include "moonrl.h"
#include <stdio.h>

int main(void) {
    mr_config cfg;
    mr_config_default(&cfg);
    cfg.device = MR_DEVICE_CPU;
    cfg.env.num_envs = 32;
    cfg.ppo.rollout_steps = 64;
    cfg.policy.num_conv = 2;            /* a network small enough for a laptop CPU */
    cfg.policy.conv_channels[0] = 8;
    cfg.policy.conv_channels[1] = 16;
    cfg.policy.hidden = 64;
    cfg.policy.critic_hidden = 64;
    cfg.total_steps = 20 * 32 * 64;     /* 20 updates */

    mr_error err;
    mr_trainer *t;
    if (mr_trainer_create(&cfg, &t, &err) != MR_OK) {
        fprintf(stderr, "moonrl: %s\n", err.msg);
        return 1;
    }
    printf("%s\n", mr_trainer_describe(t));
    mr_metrics m;
    while (!mr_trainer_done(t)) {
        if (mr_trainer_update(t, &m, &err) != MR_OK) {
            fprintf(stderr, "moonrl: %s\n", err.msg);
            break;
        }
        printf("update %3llu  sps %8.0f  return %7.2f  efficiency %.2f\n",
               (unsigned long long)m.update, m.sps, m.episode_return_mean, m.efficiency);
    }
    if (mr_trainer_save(t, "minimal.mrck", &err) != MR_OK) fprintf(stderr, "moonrl: %s\n", err.msg);

    mr_eval_config ec;
    mr_eval_config_default(&ec);
    ec.num_envs = 256;
    ec.steps = 1024;
    mr_eval_result r;
    if (mr_trainer_evaluate(t, &ec, &r, &err) == MR_OK)
        printf("eval: energy/1k %+.1f  efficiency %.1f%%  survival %.1f  deaths/1k %.2f\n",
               r.energy_per_1k, 100 * r.efficiency, r.survival, r.deaths_per_1k);
    mr_trainer_free(t);
    return 0;
}
