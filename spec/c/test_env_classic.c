/*
 * test_env_classic.c - cartpole.h and pendulum.h without Python: reset draws
 * (range, reproducibility, keying), CartPole's termination thresholds, one
 * Euler step of each against the textbook equations written out again here
 * (long double), Pendulum's clips of the torque and of the speed, the
 * normalised angle in its cost, and odd actions (NaN torque, CartPole ints
 * outside {0, 1}). spec/gym_reference.py compares whole trajectories with
 * Gymnasium's own.
 */
#include "check.h"
#include "cartpole.h"
#include "pendulum.h"

static void test_reset(void) {
    double lo[2][4], hi[2][4];
    for (int k = 0; k < 4; k++) lo[0][k] = lo[1][k] = 1e9, hi[0][k] = hi[1][k] = -1e9;
    int in_range = 1, same = 1, differs_count = 0, differs_key = 0, differs_seed = 0;
    for (uint32_t i = 0; i < 4000; i++) {
        const uint64_t seed = 7 + i % 3;
        const uint32_t key = i % 17, count = i / 17;
        double c[4], c2[4], c3[4], c4[4], c5[4], p[2], p2[2], p3[2];
        mr_cartpole_reset_state(c, seed, key, count);
        mr_cartpole_reset_state(c2, seed, key, count);
        mr_cartpole_reset_state(c3, seed, key, count + 1);
        mr_cartpole_reset_state(c4, seed, key + 1, count);
        mr_cartpole_reset_state(c5, seed + 1, key, count);
        mr_pendulum_reset_state(p, seed, key, count);
        mr_pendulum_reset_state(p2, seed, key, count);
        mr_pendulum_reset_state(p3, seed, key, count + 1);
        for (int k = 0; k < 4; k++) {
            in_range &= c[k] >= -0.05 && c[k] < 0.05;
            same &= c[k] == c2[k];
            differs_count += c[k] != c3[k];
            differs_key += c[k] != c4[k];
            differs_seed += c[k] != c5[k];
            if (c[k] < lo[0][k]) lo[0][k] = c[k];
            if (c[k] > hi[0][k]) hi[0][k] = c[k];
        }
        in_range &= p[0] >= -MR_PENDULUM_PI && p[0] < MR_PENDULUM_PI && p[1] >= -1.0 && p[1] < 1.0;
        same &= p[0] == p2[0] && p[1] == p2[1];
        differs_count += (p[0] != p3[0]) + (p[1] != p3[1]);
        for (int k = 0; k < 2; k++) {
            if (p[k] < lo[1][k]) lo[1][k] = p[k];
            if (p[k] > hi[1][k]) hi[1][k] = p[k];
        }
    }
    CHECK(in_range);
    CHECK(same);
    CHECK(differs_count == 4000 * 6);
    CHECK(differs_key == 4000 * 4);
    CHECK(differs_seed == 4000 * 4);
    for (int k = 0; k < 4; k++) CHECK(lo[0][k] < -0.0495 && hi[0][k] > 0.0495);   /* spread over the range */
    CHECK(lo[1][0] < -3.1 && hi[1][0] > 3.1 && lo[1][1] < -0.99 && hi[1][1] > 0.99);
}

static int cp_step(double x, double xd, double th, double thd, int a, double out[4]) {
    out[0] = x, out[1] = xd, out[2] = th, out[3] = thd;
    return mr_cartpole_step_state(out, a);
}

static void test_cartpole_termination(void) {
    const double thr = 12.0 * 3.141592653589793 / 180.0;
    double s[4];
    CHECK(cp_step(2.39, 1.0, 0.0, 0.0, 1, s) == 1);            /* x 2.41 */
    CHECK(cp_step(-2.39, -1.0, 0.0, 0.0, 0, s) == 1);          /* x -2.41 */
    CHECK(cp_step(2.38, 0.5, 0.0, 0.0, 1, s) == 0);            /* x 2.39 */
    CHECK(cp_step(2.4, 0.0, 0.0, 0.0, 1, s) == 0 && s[0] == 2.4);   /* on the limit: not past it */
    CHECK(cp_step(0.0, 0.0, thr - 0.001, 0.1, 1, s) == 1);     /* theta + 0.002 */
    CHECK(cp_step(0.0, 0.0, -thr + 0.001, -0.1, 0, s) == 1);
    CHECK(cp_step(0.0, 0.0, thr - 0.003, 0.1, 1, s) == 0);
    CHECK(cp_step(0.0, 0.0, 0.0, 0.0, 1, s) == 0);
    /* pushing right from rest for long enough ends it, and leans the pole left */
    double r[4] = {0, 0, 0, 0};
    int t = 0;
    while (t < 1000 && !mr_cartpole_step_state(r, 1)) t++;
    CHECK(t > 0 && t < 100);
    CHECK(r[2] < -thr || r[0] > 2.4);
}

/* The cart-pole equations as Barto, Sutton & Anderson (1983) give them, with
 * Florian's (2007) sign of the friction-free form, in long double. */
static void textbook_cartpole(const long double s[4], int a, long double out[4]) {
    const long double g = 9.8L, mc = 1.0L, mp = 0.1L, l = 0.5L, tau = 0.02L;
    const long double F = a ? 10.0L : -10.0L, th = s[2], w = s[3];
    const long double st = sinl(th), ct = cosl(th);
    const long double thacc = (g * st + ct * ((-F - mp * l * w * w * st) / (mc + mp))) /
                              (l * (4.0L / 3.0L - mp * ct * ct / (mc + mp)));
    const long double xacc = (F + mp * l * (w * w * st - thacc * ct)) / (mc + mp);
    out[0] = s[0] + tau * s[1];
    out[1] = s[1] + tau * xacc;
    out[2] = s[2] + tau * s[3];
    out[3] = s[3] + tau * thacc;
}

static void test_cartpole_step(void) {
    const double starts[3][4] = {{0.1, -0.2, 0.05, 0.3}, {-1.0, 0.7, -0.19, -1.5}, {0.0, 0.0, 0.0, 0.0}};
    for (int i = 0; i < 3; i++)
        for (int a = 0; a < 2; a++) {
            double s[4];
            long double ls[4], want[4];
            for (int k = 0; k < 4; k++) s[k] = starts[i][k], ls[k] = starts[i][k];
            mr_cartpole_step_state(s, a);
            textbook_cartpole(ls, a, want);
            for (int k = 0; k < 4; k++) CHECK_NEAR(s[k], (double)want[k], 1e-13, 0);
            float o[4];
            mr_cartpole_obs(s, o);
            for (int k = 0; k < 4; k++) CHECK(o[k] == (float)s[k]);
        }
    /* one step from (0.1, -0.2, 0.05, 0.3), pushed right: the same equations
     * in Python's float64, printed with repr */
    double s[4] = {0.1, -0.2, 0.05, 0.3};
    mr_cartpole_step_state(s, 1);
    CHECK_NEAR(s[0], 0.096, 1e-15, 0);
    CHECK_NEAR(s[1], -0.005625065781779681, 1e-13, 0);
    CHECK_NEAR(s[2], 0.056, 1e-15, 0);
    CHECK_NEAR(s[3], 0.02349585151852651, 1e-13, 0);
    /* an int outside {0, 1} is read as a & 1 */
    double p[4], q[4];
    for (int a = -4; a < 6; a++) {
        cp_step(0.1, -0.2, 0.05, 0.3, a, p);
        cp_step(0.1, -0.2, 0.05, 0.3, a & 1, q);
        CHECK(p[0] == q[0] && p[1] == q[1] && p[2] == q[2] && p[3] == q[3]);
    }
}

static float pd_step(double th, double thd, float u, double out[2]) {
    out[0] = th, out[1] = thd;
    return mr_pendulum_step_state(out, u);
}

static void test_pendulum(void) {
    /* one step against the equations in long double */
    const double th0 = 0.5, w0 = -1.25;
    const float u0 = 1.5f;
    double s[2];
    const float r = pd_step(th0, w0, u0, s);
    const long double w1 = w0 + (3.0L * 10.0L / 2.0L * sinl(th0) + 3.0L * u0) * 0.05L;
    CHECK_NEAR(s[1], (double)w1, 1e-13, 0);
    CHECK_NEAR(s[0], (double)(th0 + w1 * 0.05L), 1e-13, 0);
    CHECK_NEAR(r, -(0.25 + 0.1 * 1.5625 + 0.001 * 2.25), 1e-6, 0);
    float o[3];
    mr_pendulum_obs(s, o);
    CHECK(o[0] == (float)cos(s[0]) && o[1] == (float)sin(s[0]) && o[2] == (float)s[1]);

    /* the torque is clipped to [-2, 2]: beyond it, the same step as at the bound */
    const float big[] = {2.0001f, 5.0f, 1e30f, INFINITY};
    for (int i = 0; i < 4; i++)
        for (int sign = -1; sign <= 1; sign += 2) {
            double a[2], b[2];
            const float ra = pd_step(0.3, 0.2, sign * big[i], a), rb = pd_step(0.3, 0.2, sign * 2.0f, b);
            CHECK(a[0] == b[0] && a[1] == b[1] && ra == rb);
        }
    /* inside the bounds the torque matters */
    double a[2], b[2];
    pd_step(0.3, 0.2, 1.9f, a);
    pd_step(0.3, 0.2, 2.0f, b);
    CHECK(a[1] < b[1]);

    /* the speed is clipped to [-8, 8], and the angle moves by the clipped speed */
    float rw = pd_step(0.5, 7.9, 2.0f, s);                 /* 7.9 + (15 sin 0.5 + 6) 0.05 = 8.56 */
    CHECK(s[1] == 8.0);
    CHECK_NEAR(s[0], 0.5 + 8.0 * 0.05, 1e-15, 0);
    CHECK_NEAR(rw, -(0.25 + 0.1 * 7.9 * 7.9 + 0.004), 1e-5, 0);   /* the cost is of the state before */
    pd_step(-0.5, -7.9, -2.0f, s);
    CHECK(s[1] == -8.0);
    pd_step(0.5, 7.5, 0.0f, s);                             /* 7.5 + 0.36: not clipped */
    CHECK(s[1] < 8.0 && s[1] > 7.8);

    /* the cost takes the angle normalised into [-pi, pi) */
    const double pi = MR_PENDULUM_PI;
    CHECK_NEAR(pd_step(0.5 + 6 * pi, 0.0, 0.0f, s), -0.25, 1e-6, 0);
    CHECK_NEAR(pd_step(-pi - 0.1, 0.0, 0.0f, s), -(pi - 0.1) * (pi - 0.1), 1e-5, 0);
    CHECK_NEAR(pd_step(pi + 0.1, 0.0, 0.0f, s), -(pi - 0.1) * (pi - 0.1), 1e-5, 0);
    CHECK_NEAR(pd_step(-2 * pi + 0.1, 0.0, 0.0f, s), -0.01, 1e-6, 0);
    CHECK_NEAR(mr_pendulum_angle_normalize(pi), -pi, 1e-15, 0);

    /* a NaN torque is read as 0: the state stays finite */
    double n[2], z[2];
    const float rn = pd_step(1.0, -2.0, NAN, n), rz = pd_step(1.0, -2.0, 0.0f, z);
    CHECK(n[0] == z[0] && n[1] == z[1] && rn == rz);
    CHECK(isfinite(n[0]) && isfinite(n[1]) && isfinite(rn));
    CHECK(isfinite(pd_step(1.0, -2.0, -NAN, n)) && n[0] == z[0]);
}

int main(void) {
    test_reset();
    test_cartpole_termination();
    test_cartpole_step();
    test_pendulum();
    printf("test_env_classic: %d passed, %d failed\n", check_passed, check_failed);
    return check_failed ? 1 : 0;
}
