"""Per-session token state: the exact tokens the engine saw and produced, turn by turn (token in, token out).

As miles' ``single_user_turn_trajectory.py`` with its TITO tokenizer: a conversation is never re-tokenized whole."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from actors.tokenizer import Tokenizer, message_text


class TrajectoryError(ValueError):
    """A request the session cannot turn into exact tokens (the message says why and what to do)."""


@dataclass(frozen=True)
class Turn:
    """One engine call: the prompt it was given, what it produced, and the messages it answered."""

    messages: tuple[tuple[str, str], ...]  # the request's (role, text) pairs
    reply: str  # the assistant text returned to the agent
    prompt_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str
    weight_version: str | None
    sampling_params: dict[str, Any] = field(default_factory=dict)  # what the engine was asked with

    @property
    def history(self) -> tuple[tuple[str, str], ...]:
        """The conversation after this turn: its messages and the reply."""
        return (*self.messages, ("assistant", self.reply))

    @property
    def token_ids(self) -> tuple[int, ...]:
        return self.prompt_ids + self.output_ids

    def record(self) -> dict[str, Any]:
        return {
            "messages": [{"role": role, "content": text} for role, text in self.messages],
            "reply": self.reply,
            "prompt_ids": list(self.prompt_ids),
            "output_ids": list(self.output_ids),
            "output_logprobs": list(self.logprobs),
            "finish_reason": self.finish_reason,
            "weight_version": self.weight_version,
            "sampling_params": dict(self.sampling_params),
        }


@dataclass
class Leaf:
    """One conversation of a session: a chain of turns, each prompt extending the previous turn's tokens."""

    occurrence: int
    turns: list[Turn] = field(default_factory=list)

    def sample(self) -> dict[str, Any]:
        """The training row: all tokens, a loss mask that is 1 exactly on the engine's output tokens (never on the
        prompt, tool output or other appended messages), and the engine's logprobs aligned with it (0 elsewhere)."""
        last = self.turns[-1]
        tokens = list(last.token_ids)
        mask = [0] * len(tokens)
        logprobs = [0.0] * len(tokens)
        for turn in self.turns:
            start = len(turn.prompt_ids)
            for offset, logprob in enumerate(turn.logprobs):
                logprobs[start + offset] = logprob
            for offset in range(len(turn.output_ids)):
                mask[start + offset] = 1
        return {
            "occurrence": self.occurrence,
            "tokens": tokens,
            "loss_mask": mask,
            "rollout_logprobs": logprobs,
            "prompt_length": len(self.turns[0].prompt_ids),
            "turns": len(self.turns),
            "final_reply": last.reply,
            "finish_reason": last.finish_reason,
            "weight_versions": [turn.weight_version for turn in self.turns],
        }


@dataclass(frozen=True)
class PlannedTurn:
    """Where a request goes and the exact prompt tokens to send: ``base`` is ``(leaf, turns kept)`` (continue the
    leaf when it still has exactly that many turns, else fork it there), None for a new leaf."""

    base: tuple[Leaf, int] | None
    prompt_ids: list[int]
    messages: tuple[tuple[str, str], ...]


def normalize_messages(messages: Any) -> tuple[tuple[str, str], ...]:
    """``(role, text)`` pairs of an OpenAI ``messages`` list, checked (TrajectoryError names the bad entry)."""
    if not isinstance(messages, list) or not messages:
        raise TrajectoryError("messages must be a non-empty list of {role, content} objects")
    out = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise TrajectoryError(f"messages[{index}] must be an object with a string 'role'")
        try:
            out.append((message["role"], message_text(message.get("content"), index)))
        except ValueError as exc:
            raise TrajectoryError(str(exc)) from None
    return tuple(out)


# A request continues the leaf whose whole history it extends; one that extends an earlier point of a leaf (the
# agent went back, or two requests raced on one leaf) forks a new leaf sharing the turns up to there; one that
# extends nothing starts a new leaf. Leaves are numbered in creation order: a sample is keyed (sample_index,
# occurrence).
class SessionTrajectory:
    """The leaves of one session and the rule that gives each request its exact prompt tokens."""

    def __init__(self, tokenizer: Tokenizer, *, sample_index: int | None = None, max_turns: int = 64) -> None:
        self.tokenizer = tokenizer
        self.sample_index = sample_index
        self.max_turns = max_turns
        self.leaves: list[Leaf] = []

    @property
    def turns(self) -> int:
        """Engine calls recorded (a forked leaf shares its first turns with its parent: counted once)."""
        return len({id(turn) for leaf in self.leaves for turn in leaf.turns})

    def plan(self, messages: Any) -> PlannedTurn:
        """The leaf ``messages`` continue (or fork, or start) and the prompt tokens to send for them."""
        pairs = normalize_messages(messages)
        if self.turns >= self.max_turns:
            raise TrajectoryError(f"the session has {self.turns} turns, its limit (max_turns); start a new session")
        best: tuple[int, Leaf, int] | None = None  # (messages matched, leaf, turns kept)
        for leaf in self.leaves:
            for kept in range(len(leaf.turns), 0, -1):
                history = leaf.turns[kept - 1].history
                if pairs[: len(history)] == history:
                    if best is None or len(history) > best[0]:
                        best = (len(history), leaf, kept)
                    break
        if best is None:
            return PlannedTurn(None, self._first_prompt(pairs), pairs)
        matched, leaf, kept = best
        base = leaf.turns[kept - 1]
        appended = pairs[matched:]
        if not appended:
            raise TrajectoryError("messages add nothing after the last assistant reply: append a tool or user message")
        return PlannedTurn((leaf, kept), list(base.token_ids) + self._suffix_ids(base.history, appended), pairs)

    def commit(self, planned: PlannedTurn, turn: Turn) -> Leaf:
        """Record ``turn`` (sent with ``planned.prompt_ids``): on its leaf, or on a new or forked one (also when
        another request of the same leaf was recorded meanwhile). Returns the leaf."""
        if list(turn.prompt_ids) != planned.prompt_ids:
            raise TrajectoryError("internal: the turn's prompt is not the planned one")
        if planned.base is not None and planned.base[1] == len(planned.base[0].turns):
            leaf = planned.base[0]
        else:
            kept = planned.base[0].turns[: planned.base[1]] if planned.base else []
            leaf = Leaf(occurrence=len(self.leaves), turns=list(kept))
            self.leaves.append(leaf)
        leaf.turns.append(turn)
        return leaf

    def samples(self) -> list[dict[str, Any]]:
        """One training row per leaf, in occurrence order, each with ``sample_index``."""
        return [{"sample_index": self.sample_index, **leaf.sample()} for leaf in self.leaves if leaf.turns]

    def _first_prompt(self, pairs: tuple[tuple[str, str], ...]) -> list[int]:
        messages = [{"role": role, "content": text} for role, text in pairs]
        try:
            return list(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True))
        except Exception as exc:  # jinja templates raise what they like
            raise TrajectoryError(f"messages: the chat template refused them: {exc}") from None

    # The chat template's text for history + appended past its text for history, encoded without special tokens:
    # a template that strips or rewrites the history cannot change tokens already recorded.
    def _suffix_ids(self, history: tuple[tuple[str, str], ...], appended: tuple[tuple[str, str], ...]) -> list[int]:
        """Tokens of ``appended`` (and the generation prompt) after ``history``, from the template's text."""
        render = getattr(self.tokenizer, "render_chat", None)
        if render is None:
            raise TrajectoryError("the tokenizer cannot render chat text (render_chat), which multi-turn sessions need")
        as_messages = lambda pairs: [{"role": r, "content": t} for r, t in pairs]  # noqa: E731
        try:
            before = render(as_messages(history), add_generation_prompt=False)
            after = render(as_messages(history + appended), add_generation_prompt=True)
        except Exception as exc:
            raise TrajectoryError(f"messages: the chat template refused them: {exc}") from None
        if not after.startswith(before):
            raise TrajectoryError(
                "the chat template renders the history differently once messages are appended, so the appended "
                "messages' tokens cannot be separated; use a template whose output only grows as messages are added"
            )
        return list(self.tokenizer.encode(after[len(before) :], add_special_tokens=False))
