"""A procedurally generated text game the model plays turn by turn (the textgame task).

A game is a handful of rooms joined as a random tree, a key in one room and a locked door in
another. The model sees only the room it is in: `C:AD*>` says room C, exits to A and D, the key
lies here (`*`; a door shows `#`). It acts by writing one action and `;`: a room letter moves
there (through an exit; anything else changes nothing), `k` takes the key, `o` opens the door
(with the key, in the door's room: the game is won). After each `;` the environment writes the
new observation, or `WIN`. The layout follows from the game number at the prompt's start
(`4711|A:BC>`), so the environment and the verifier rebuild it, and nothing about it is in the
prompt but what the model has seen.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

STOP = ";"
WIN = "WIN"
ROOMS = "ABCDEFGH"


@dataclass(frozen=True)
class Layout:
    edges: dict[str, str]  # room -> its exits, sorted
    start: str
    key: str
    door: str


def layout(game: int, rooms: int) -> Layout:
    """The game's rooms as a random tree; key and door in two rooms other than the start, the door
    where the key is not."""
    rng = random.Random(f"textgame:{game}:{rooms}")
    names = list(ROOMS[:rooms])
    rng.shuffle(names)
    adj: dict[str, set[str]] = {n: set() for n in names}
    for i in range(1, len(names)):
        other = names[rng.randrange(i)]
        adj[names[i]].add(other)
        adj[other].add(names[i])
    start, key, door = names[0], *rng.sample(names[1:], 2)
    return Layout({n: "".join(sorted(v)) for n, v in adj.items()}, start, key, door)


@dataclass
class State:
    room: str
    has_key: bool = False
    won: bool = False


def observe(lay: Layout, st: State) -> str:
    if st.won:
        return WIN
    marks = ("*" if lay.key == st.room and not st.has_key else "") + ("#" if lay.door == st.room else "")
    return f"{st.room}:{lay.edges[st.room]}{marks}>"


def step(lay: Layout, st: State, action: str) -> State:
    if st.won:
        return st
    if len(action) == 1 and action in lay.edges[st.room]:
        return State(action, st.has_key)
    if action == "k" and lay.key == st.room:
        return State(st.room, True)
    if action == "o" and lay.door == st.room and st.has_key:
        return State(st.room, True, True)
    return st


def parse_prompt(prompt: str) -> tuple[int, int]:
    """(game number, rooms) from a prompt `GAME.ROOMS|OBS`."""
    head = prompt.split("|", 1)[0]
    game, rooms = head.split(".")
    return int(game), int(rooms)


def prompt_of(game: int, rooms: int) -> str:
    lay = layout(game, rooms)
    return f"{game}.{rooms}|{observe(lay, State(lay.start))}"


def replay(prompt: str, completion: str, max_actions: int) -> tuple[State, bool]:
    """Play the completion's actions (each up to a `;`) from the start: (state after the last
    complete action, whether the text between actions is what the environment wrote). Actions past
    `max_actions` are not played."""
    lay = layout(*parse_prompt(prompt))
    st, pos, acts = State(lay.start), 0, 0
    while acts < max_actions and not st.won:
        end = completion.find(STOP, pos)
        if end < 0:
            break
        st = step(lay, st, completion[pos:end].strip())
        acts += 1
        obs = observe(lay, st)
        pos = end + 1
        if pos == len(completion):
            break  # the environment has not answered this action yet
        if not completion.startswith(obs, pos):
            return st, False
        pos += len(obs)
    return st, True


class TextGame:
    """The tool interface of rlbench/envs: `respond` after each `;`, `won` for the verifier."""

    name = "textgame"
    stop = STOP
    max_actions = 12

    def respond(self, prompt: str, completion: str) -> str:
        try:
            st, _ = replay(prompt, completion, self.max_actions)
        except (ValueError, KeyError):
            return "?"
        lay = layout(*parse_prompt(prompt))
        return observe(lay, st)

    @staticmethod
    def final_text(completion: str) -> str:
        return completion
