# The reference for spec/pb2_spec.lua's Gaussian process (lua/moonrl/sweep/gp.lua):
# the same kernel, data and points in numpy float64 (numpy.linalg.cholesky,
# numpy.linalg.solve, slogdet: an independent implementation of the algebra).
#   env -u PYTHONPATH build/venv/bin/python spec/gp_reference.py
# prints the numbers pb2_spec.lua holds.
import numpy as np

X = np.array([[0, 0.1, 0.9], [0, 0.4, 0.2], [1, 0.8, 0.5], [1, 0.3, 0.3], [2, 0.6, 0.7], [3, 0.2, 0.1]], dtype=np.float64)
y = np.array([0.5, -1.2, 0.3, 1.1, -0.4, 0.8], dtype=np.float64)
P = np.array([[3, 0.5, 0.5], [4, 0.1, 0.9], [2, 0.95, 0.05]], dtype=np.float64)
var, ls, eps, noise = 1.3, 0.2, 0.1, 0.05

def k(a, b):
    d2 = np.sum((a[1:] - b[1:]) ** 2)
    return var * np.exp(-d2 / ls) * (1 - eps) ** (abs(a[0] - b[0]) / 2)

K = np.array([[k(a, b) for b in X] for a in X]) + noise * np.eye(len(X))
L = np.linalg.cholesky(K)
alpha = np.linalg.solve(K, y)
sign, logdet = np.linalg.slogdet(K)
log_ml = -0.5 * y @ alpha - 0.5 * logdet - 0.5 * len(X) * np.log(2 * np.pi)
print("L =", repr(L.tolist()))
print("log_ml =", repr(log_ml))
for p in P:
    ks = np.array([k(p, b) for b in X])
    mean = ks @ alpha
    v = k(p, p) - ks @ np.linalg.solve(K, ks)
    print("predict", p.tolist(), repr(mean), repr(v))
