/*
 * test_eval_records.c - mr_trainer_evaluate_records: the same results as
 * mr_trainer_evaluate bit for bit, and records that re-add to them exactly.
 *
 * A small untrained network on a small grid dies often, so a few hundred
 * steps give deaths, survivors and both kinds of food. Checked per mode:
 *   - out equals mr_trainer_evaluate's and mr_trainer_evaluate_progress's
 *     (memcmp), and evaluating twice gives the same records
 *   - deaths = records with died = 1 = deaths_per_1k x steps / 1000, and the
 *     survivors are exactly one per (run, environment)
 *   - the sums of steps, food and poison are the agent-steps, food and
 *     poison of the table (recomputed the engine's way: the same doubles)
 *   - per (run, env) the episodes tile the run: starts follow each other
 *   - energy_gained = food - 2 poison - 0.01 steps, final energy <= 0 at a
 *     death and = 1 + energy gained; survival and the per-environment
 *     efficiency recomputed from the records equal the table's
 */
#include "moonrl.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>

int main(void) {
    mr_config c;
    mr_config_default(&c);
    c.env.num_envs = 8;
    c.env.grid_size = 24;
    c.env.density_min = 30;
    c.env.density_max = 90;
    c.policy.num_conv = 1;
    c.policy.conv_channels[0] = 4;
    c.policy.hidden = 16;
    c.policy.critic_hidden = 16;
    c.ppo.rollout_steps = 4;
    c.threads = 2;
    c.device = MR_DEVICE_CPU;
    mr_trainer *t = NULL;
    mr_error e;
    CHECK_MSG(mr_trainer_create(&c, &t, &e) == MR_OK, "%s", e.msg);
    if (!t) return 1;
    for (int mode = 0; mode <= MR_MODE_PROXY; mode++) {
        mr_eval_config ec;
        mr_eval_config_default(&ec);
        ec.mode = mode;
        ec.num_envs = 12;
        ec.steps = 400;
        ec.runs = 2;
        ec.seed = 77 + (uint64_t)mode;
        mr_eval_result r0, r1, r2;
        mr_eval_records a, b;
        CHECK(mr_trainer_evaluate(t, &ec, &r0, &e) == MR_OK);
        CHECK(mr_trainer_evaluate_progress(t, &ec, &r1, NULL, NULL, &e) == MR_OK);
        CHECK_MSG(mr_trainer_evaluate_records(t, &ec, &r2, &a, NULL, NULL, &e) == MR_OK, "%s", e.msg);
        CHECK(memcmp(&r0, &r2, sizeof r0) == 0 && memcmp(&r1, &r2, sizeof r1) == 0);
        CHECK(mr_trainer_evaluate_records(t, &ec, &r1, &b, NULL, NULL, &e) == MR_OK);
        CHECK(a.count == b.count && memcmp(a.rec, b.rec, sizeof(mr_eval_record) * a.count) == 0);
        mr_eval_records_free(&b);
        CHECK(b.rec == NULL && b.count == 0);

        double food = 0, poison = 0, steps = 0, deaths = 0, energy = 0;
        int survivors = 0, tiled = 1, energy_ok = 1;
        static int seen[2][12], next[2][12];
        memset(seen, 0, sizeof seen);
        memset(next, 0, sizeof next);
        static double pf[2][12], pp[2][12];
        memset(pf, 0, sizeof pf);
        memset(pp, 0, sizeof pp);
        for (uint64_t k = 0; k < a.count; k++) {
            const mr_eval_record *x = &a.rec[k];
            food += x->food;
            poison += x->poison;
            steps += x->steps;
            deaths += x->died;
            energy += x->energy_gained_centi;
            pf[x->run][x->env] += x->food;
            pp[x->run][x->env] += x->poison;
            tiled &= x->start == next[x->run][x->env] && x->steps >= (x->died ? 1 : 0);
            next[x->run][x->env] = x->start + x->steps;
            energy_ok &= x->energy_gained_centi == 100 * x->food - 200 * x->poison - x->steps;
            energy_ok &= x->final_energy == (float)((100.0 + x->energy_gained_centi) / 100.0);
            if (x->died) energy_ok &= x->final_energy <= 0.0f;
            else {
                survivors++;
                seen[x->run][x->env]++;
                energy_ok &= x->final_energy > 0.0f;
            }
        }
        for (int run = 0; run < 2; run++)
            for (int i = 0; i < 12; i++) {
                CHECK(seen[run][i] == 1);
                CHECK(next[run][i] == ec.steps);
            }
        CHECK(tiled && energy_ok);
        CHECK(survivors == 24);
        CHECK((double)a.deaths == deaths && a.count == a.deaths + 24);
        CHECK_MSG(deaths > 10 && food > 0 && poison > 0, "mode %d: deaths %g food %g poison %g", mode, deaths, food,
                  poison);
        CHECK(steps == 2.0 * 12 * 400);
        const double k = 1000.0 / steps;
        CHECK(food * k == r2.food_per_1k);
        CHECK(poison * k == r2.poison_per_1k);
        CHECK(deaths * k == r2.deaths_per_1k);
        CHECK_NEAR(energy / 100.0 * k, r2.energy_per_1k, 1e-9, 1e-12);
        CHECK(steps / (deaths + 24) == r2.survival);
        double eff = 0, n = 0;
        for (int run = 0; run < 2; run++)
            for (int i = 0; i < 12; i++)
                if (pf[run][i] + pp[run][i] > 0) {
                    eff += pf[run][i] / (pf[run][i] + pp[run][i]);
                    n += 1;
                }
        CHECK(n > 0 && eff / n == r2.efficiency);
        mr_eval_records_free(&a);
    }
    mr_trainer_free(t);
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}
