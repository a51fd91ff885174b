/*
 * gym_replay.c - replays episodes of cartpole.h and pendulum.h for
 * spec/gym_reference.py, which compares them with Gymnasium's own.
 *
 * stdin, whitespace-separated, one episode after another:
 *   cartpole x x_dot theta theta_dot n a_1 ... a_n     (int actions)
 *   pendulum th thdot n u_1 ... u_n                    (torques, read as float)
 * stdout, one line per step: the observation, the reward and the terminated
 * flag (0/1), numbers with %.17g. The start state is set, not drawn.
 * `gym_replay --spaces` prints the two environments' declared sizes instead.
 * Exit status 2 on malformed input.
 */
#include <stdio.h>
#include <string.h>
#include "cartpole.h"
#include "pendulum.h"

static int bad(const char *what) {
    fprintf(stderr, "gym_replay: malformed input (%s)\n", what);
    return 2;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--spaces") == 0) {
        printf("cartpole obs %d actions %d max_steps %d\n", MR_CARTPOLE_OBS, MR_CARTPOLE_ACTIONS,
               MR_CARTPOLE_MAX_STEPS);
        printf("pendulum obs %d act_dim %d low %.17g high %.17g max_steps %d\n", MR_PENDULUM_OBS,
               MR_PENDULUM_ACT_DIM, (double)MR_PENDULUM_ACT_LOW, (double)MR_PENDULUM_ACT_HIGH,
               MR_PENDULUM_MAX_STEPS);
        return 0;
    }
    char env[16];
    while (scanf("%15s", env) == 1) {
        double s[4];
        float o[4];
        int n;
        if (strcmp(env, "cartpole") == 0) {
            if (scanf("%lf %lf %lf %lf %d", &s[0], &s[1], &s[2], &s[3], &n) != 5) return bad("cartpole header");
            for (int t = 0; t < n; t++) {
                int a;
                if (scanf("%d", &a) != 1) return bad("cartpole action");
                const int term = mr_cartpole_step_state(s, a);
                mr_cartpole_obs(s, o);
                printf("%.17g %.17g %.17g %.17g %.17g %d\n", o[0], o[1], o[2], o[3],
                       (double)MR_CARTPOLE_REWARD, term);
            }
        } else if (strcmp(env, "pendulum") == 0) {
            if (scanf("%lf %lf %d", &s[0], &s[1], &n) != 3) return bad("pendulum header");
            for (int t = 0; t < n; t++) {
                double u;
                if (scanf("%lf", &u) != 1) return bad("pendulum torque");
                const float r = mr_pendulum_step_state(s, (float)u);
                mr_pendulum_obs(s, o);
                printf("%.17g %.17g %.17g %.17g 0\n", o[0], o[1], o[2], r);
            }
        } else {
            return bad(env);
        }
    }
    return 0;
}
