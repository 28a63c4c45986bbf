"""Writes the tiny tool task's lookup table and prompts (deterministic; the outputs are shipped).

    python examples/tiny_tool/make_data.py

table.json: 2000 random three-letter keys -> one digit each (the tool's database).
prompts.jsonl: 1024 rows {"input": "<key>?", "label": "<digit>"}: the answer is the key's value,
which the model cannot know without calling the tool (a key appears about once per run).
"""
import json
import random
import string
from pathlib import Path

HERE = Path(__file__).parent


def main(n_keys: int = 2000, n_prompts: int = 1024, seed: int = 0) -> None:
    rng = random.Random(seed)
    keys = set()
    while len(keys) < n_keys:
        keys.add("".join(rng.choice(string.ascii_lowercase) for _ in range(3)))
    table = {k: rng.choice(string.digits) for k in sorted(keys)}
    (HERE / "table.json").write_text(json.dumps(table, indent=0, sort_keys=True) + "\n")
    rows = [rng.choice(sorted(table)) for _ in range(n_prompts)]
    with (HERE / "prompts.jsonl").open("w") as f:
        for k in rows:
            f.write(json.dumps({"input": f"{k}?", "label": table[k]}) + "\n")


if __name__ == "__main__":
    main()
