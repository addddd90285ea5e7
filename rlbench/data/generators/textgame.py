"""Games of rlbench/envs/textgame.py as task items (the textgame task).

`main`: games of 4 or 5 rooms; `heldout`: games of 6 rooms, longer walks through layouts of a
size that train, dev and test never show. An item's `answer` is the game (`GAME.ROOMS`), which
the verifier replays the completion's actions on. Its `trace`, for pretraining corpora only, is a
transcript of a noisy player: with probability `explore` a random action, else the shortest way
to the key and then to the door. A base model pretrained on such play wins some games and
wanders in others: winning within the action limit is what RL has to raise.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any

from rlbench.envs.textgame import STOP, Layout, State, layout, observe, prompt_of, step

REWARD = "game_win"
MAX_NEW_TOKENS = 110
TOOL = "textgame"
MAX_ACTIONS = 12
MAX_CALLS = MAX_ACTIONS  # the environment answers every action
DEFAULTS = {"explore": 0.4}


def _toward(lay: Layout, src: str, dst: str) -> str:
    """The first room on the shortest walk from src to dst."""
    prev = {src: ""}
    queue = deque([src])
    while queue:
        room = queue.popleft()
        for nxt in lay.edges[room]:
            if nxt not in prev:
                prev[nxt] = room
                queue.append(nxt)
    room = dst
    while prev[room] != src:
        room = prev[room]
    return room


def best_action(lay: Layout, st: State) -> str:
    goal = lay.door if st.has_key else lay.key
    if st.room == goal:
        return "o" if st.has_key else "k"
    return _toward(lay, st.room, goal)


def transcript(lay: Layout, rng: random.Random, explore: float) -> str:
    st, out = State(lay.start), []
    for _ in range(MAX_ACTIONS):
        act = rng.choice(lay.edges[st.room] + "ko") if rng.random() < explore else best_action(lay, st)
        st = step(lay, st, act)
        out.append(f"{act}{STOP}{observe(lay, st)}")
        if st.won:
            break
    return "".join(out)


def generate(family: str, rng: random.Random, params: dict[str, Any]) -> dict[str, Any]:
    if family not in ("main", "heldout"):
        raise ValueError(f"unknown family '{family}' (main | heldout)")
    p = {**DEFAULTS, **(params or {})}
    rooms = rng.choice((4, 5)) if family == "main" else 6
    game = rng.randrange(1_000_000)
    lay = layout(game, rooms)
    return {"prompt": prompt_of(game, rooms), "answer": f"{game}.{rooms}",
            "trace": transcript(lay, rng, float(p["explore"])), "family": family}
