"""The bash reader: slime scripts are read, never run; every argument keeps its file:line."""

import shlex
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlrun.interop.bash_lexer import BashSyntaxError, CmdSub, Lit, Param, tokenize
from rlrun.interop.bash_script import ScriptError, read_script

DATA = Path(__file__).resolve().parents[1] / "data" / "slime"


def write(tmp_path: Path, text: str, name: str = "run.sh") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def args_of(path: Path) -> list[str]:
    script = read_script(path)
    assert script.launch is not None
    return [a.text for a in script.launch.args]


def test_lexer_keeps_quote_context_for_expansion():
    (word,) = [t for t in tokenize("""a'$X'"$Y"$Z""") if not hasattr(t, "text")]
    assert word.segments == (Lit("a"), Lit("$X"), Param("Y", True), Param("Z", False))


def test_lexer_command_substitution_and_continuation():
    toks = tokenize('D="$(cd -- "$(dirname -- x)" && pwd)" \\\n  next # comment\n')
    words = [t for t in toks if hasattr(t, "segments")]
    assert isinstance(words[0].segments[1], CmdSub)
    assert words[1].literal() == "next" and words[1].line == 2
    assert len(words) == 2  # the comment is gone


def test_lexer_reports_unterminated_quote_with_line():
    with pytest.raises(BashSyntaxError, match=r"x.sh:2: unterminated double quote"):
        tokenize('A=1\nB="oops\n', "x.sh")


def test_arrays_multiline_comments_splicing_and_defaults(tmp_path):
    script = write(tmp_path, """
DIR="${DIR:-/data}"
N=4
A=(
   --one 1   # trailing comment
   # a whole comment line
   --path $DIR/x.jsonl
   --quoted "two words"
)
B=(--n ${N} --empty "")
B+=(--more)
WORDS="--w1 --w2"
python3 train.py ${A[@]} "${B[@]}" $WORDS --tail=$UNSET_VAR
""")
    assert args_of(script) == ["--one", "1", "--path", "/data/x.jsonl", "--quoted", "two words",
                               "--n", "4", "--empty", "", "--more", "--w1", "--w2", "--tail=${UNSET_VAR}"]
    notes = read_script(script).notes
    assert any("UNSET_VAR" in n and "not set in the script" in n for n in notes)


def test_environment_default_quotes_are_removed(tmp_path):
    script = write(tmp_path, 'export V=${V:-"1"}\nexport W=${W:-${V}}\npython3 train.py --x\n')
    assert read_script(script).env() == {"V": "1", "W": "1"}


def test_loops_and_ifs_are_skipped_and_their_variables_unknown(tmp_path):
    script = write(tmp_path, """
if [ -n "$X" ]; then
  HAS=1
else
  HAS=0
fi
for ((i=0; i<3; i++)); do
  arr+=(1)
done
printf -v FREQ "[%s]" "x"
setup() {
  FN=1
}
python3 train.py --has $HAS --freq "$FREQ" --fn $FN
""")
    read = read_script(script)
    assert [a.text for a in read.launch.args] == ["--has", "${HAS}", "--freq", "${FREQ}", "--fn", "${FN}"]
    assert any("HAS" in n and "loop/if" in n for n in read.notes)
    assert any("printf -v" in n for n in read.notes)


def test_seed_script_sources_model_script_and_finds_ray_job(tmp_path):
    read = read_script(DATA / "run-qwen3-4B-mi300x.sh")
    assert read.sourced == [DATA / "models" / "qwen3-4B.sh"]
    launch = read.launch
    assert launch.entry == "train.py" and launch.address == "http://127.0.0.1:8265"
    assert launch.runtime_env_vars == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    texts = [a.text for a in launch.args]
    assert texts[:8] == ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "8", "--colocate",
                         "--no-offload-train", "--no-offload-rollout", "--num-layers"]
    # ${MODEL_DIR} took its default, ${MODEL_ARGS_ROTARY_BASE:-1000000} too
    assert texts[texts.index("--hf-checkpoint") + 1] == "/root/Qwen3-4B"
    assert texts[texts.index("--rotary-base") + 1] == "1000000"
    rope = next(a for a in launch.args if a.text == "--rotary-base")
    assert rope.where == "qwen3-4B.sh:14 (MODEL_ARGS)"
    gaf = next(a for a in launch.args if a.text == "--no-gradient-accumulation-fusion")
    assert gaf.array == "MISC_ARGS"
    assert read.env()["HIP_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"


def test_runtime_env_json_built_from_an_escaped_variable():
    launch = read_script(DATA / "run-glm4-9B-h100-disagg.sh").launch
    assert launch.runtime_env_vars == {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_CUMEM_ENABLE": "0"}
    texts = [a.text for a in launch.args]
    assert texts[texts.index("--spec") + 1: texts.index("--spec") + 3] == ["slime_plugins.models.glm4",
                                                                            "get_glm_spec"]
    assert texts[texts.index("--prompt-data") + 1] == "/root/dapo-math-17k/dapo-math-17k.jsonl"


def test_missing_model_script_is_a_note_not_a_crash(tmp_path):
    script = write(tmp_path, 'source "$(dirname "$0")/models/none.sh"\npython3 train.py --x 1\n')
    read = read_script(script)
    assert [a.text for a in read.launch.args] == ["--x", "1"]
    assert any("not found" in n for n in read.notes)


def test_no_such_script_and_unclosed_array(tmp_path):
    with pytest.raises(ScriptError, match="no such file"):
        read_script(tmp_path / "nope.sh")
    with pytest.raises(ScriptError, match=r"run.sh:1: array A=\( is never closed"):
        read_script(write(tmp_path, "A=(\n --x\n"))


def test_ray_job_without_python_entry_is_an_error(tmp_path):
    with pytest.raises(ScriptError, match="does not run `-- python3 train.py"):
        read_script(write(tmp_path, "ray job submit --address=x -- bash go.sh\n"))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=12), max_size=6))
def test_any_words_quoted_by_shlex_read_back_unchanged(tmp_path_factory, words):
    """What the export writes (shlex.quote) the reader gives back word for word, spaces, $ and quotes included."""
    path = tmp_path_factory.mktemp("q") / "run.sh"
    body = "\n".join("   " + shlex.quote(w) for w in words)
    path.write_text(f"A=(\n{body}\n)\npython3 train.py \"${{A[@]}}\"\n")
    assert args_of(path) == words


def test_empty_quoted_scalar_is_a_word_empty_array_is_none(tmp_path):
    script = write(tmp_path, 'E=""\nA=()\npython3 train.py --e "$E" "${A[@]}" --end\n')
    assert args_of(script) == ["--e", "", "--end"]
