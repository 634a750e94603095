"""k-means with a closed-form cost, for server-side clustering (COMET's c-means).

Lloyd's algorithm from a k-means++ start, run for exactly ``iterations``
iterations (no early stop: once converged, further iterations change
nothing), so its FLOPs depend only on the shapes (:func:`kmeans_flops`) and
a replayed or cost-only run times it exactly as a real one.
"""

from __future__ import annotations

import numpy as np


def kmeans(
    points: np.ndarray, clusters: int, iterations: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Cluster the rows of ``points`` [m, d] into ``min(clusters, m)`` groups.

    Returns (centroids [c, d], assignment [m]). Float64 throughout; ties go
    to the lowest centroid index; a centroid left without points keeps its
    position. Deterministic for a given ``rng`` state.
    """
    points = np.asarray(points, dtype=np.float64)
    m = len(points)
    c = min(clusters, m)
    centroids = np.empty((c, points.shape[1]))
    centroids[0] = points[rng.integers(m)]
    nearest = ((points - centroids[0]) ** 2).sum(axis=1)
    for j in range(1, c):  # k-means++: the next centre with probability ~ squared distance
        total = nearest.sum()
        pick = rng.choice(m, p=nearest / total) if total > 0 else rng.integers(m)
        centroids[j] = points[pick]
        nearest = np.minimum(nearest, ((points - centroids[j]) ** 2).sum(axis=1))
    assignment = np.zeros(m, dtype=np.int64)
    for _ in range(iterations):
        distances = ((points[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
        assignment = distances.argmin(axis=1)
        for j in range(c):
            members = points[assignment == j]
            if len(members):
                centroids[j] = members.mean(axis=0)
    return centroids, assignment


def kmeans_flops(m: int, d: int, clusters: int, iterations: int) -> int:
    """FLOPs of :func:`kmeans` on ``m`` points of dimension ``d``.

    k-means++ start: one squared distance (subtract, square, add: 3d) from
    every point to every chosen centre; each iteration: 3d per point and
    centre, then a mean per centre (m d adds, c d divisions).
    """
    c = min(clusters, m)
    start = 3 * m * d * c
    per_iteration = 3 * m * c * d + m * d + c * d
    return start + iterations * per_iteration
