"""Stop each generated answer, on its own, once the tool calls it parses to can no longer change."""

from __future__ import annotations

from typing import Any

from envfactory_assets.tooluse.tool_calls import answer_is_complete


def answer_stop_criterion(tokenizer: Any, width: int, prose_tokens: int) -> Any:
    """A transformers ``StoppingCriteria``, per row: a row stops once its new text is a complete answer
    (:func:`~envfactory_assets.tooluse.tool_calls.answer_is_complete`); its ``stopped`` set holds the rows it
    stopped. For outputs scored by their calls alone (a single-turn benchmark, the checkpoint's validity
    pass): the rest of a batch no longer waits for one output's prose.

    ``width``: prompt columns of ``input_ids`` (new tokens start there). A stopped row is not decoded again;
    every other row's new tokens are decoded once per step, and its prose counted with ``tokenizer`` (well
    under a millisecond per row at these lengths, next to the tens of milliseconds a CPU step of the model
    costs).
    """
    import torch
    from transformers import StoppingCriteria

    def count_tokens(piece: str) -> int:
        return len(tokenizer(piece, add_special_tokens=False)["input_ids"])

    class AnswerStop(StoppingCriteria):
        def __init__(self) -> None:
            self.stopped: set[int] = set()

        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            new = input_ids[:, width:]
            for row in range(new.shape[0]):
                if row not in self.stopped and answer_is_complete(
                    tokenizer.decode(new[row], skip_special_tokens=True), prose_tokens, count_tokens
                ):
                    self.stopped.add(row)
            return torch.tensor(
                [row in self.stopped for row in range(new.shape[0])], dtype=torch.bool, device=input_ids.device
            )

    return AnswerStop()
