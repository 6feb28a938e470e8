"""FOCUS written per client, following the authors' Algorithm 1: every client keeps the
gradient it computed last; the server keeps a model and a tracker that it never resets.

A round nobody joins: the authors' server waits for a participant, so by default
(``skip_empty_rounds=True``) nothing happens; with False the server steps along its tracker.
"""

import numpy as np


def focus(problem, masks, x0, lr, local_steps, skip_empty_rounds=True, received=None):
    """Server model after each round, shape (rounds + 1, dim).

    ``received``: optional masks of the participants whose uploads arrive (the others
    trained, but their tracker was lost on the way: they keep it, and start their next
    round from it)."""
    n = problem.n_clients
    x_server = np.array(x0, dtype=float)
    y_server = np.zeros_like(x_server)
    stored = [np.zeros_like(x_server) for _ in range(n)]
    kept = [np.zeros_like(x_server) for _ in range(n)]  # trackers whose upload was lost
    history = [x_server.copy()]
    for r, mask in enumerate(masks):
        if not mask.any() and skip_empty_rounds:
            history.append(x_server.copy())
            continue
        for i in range(n):
            if not mask[i]:
                continue
            x = x_server.copy()
            y = kept[i]
            for k in range(local_steps):
                if k > 0:
                    x = x - lr * y
                g = problem.gradients(np.array([i]), x[None, :])[0]
                y = y + g - stored[i]
                stored[i] = g
            if received is None or received[r][i]:
                y_server = y_server + y
                kept[i] = np.zeros_like(x_server)
            else:
                kept[i] = y
        x_server = x_server - lr * y_server
        history.append(x_server.copy())
    return np.array(history)
