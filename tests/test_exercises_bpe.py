"""Notebook 15's merge check refuses a merge written on the ids' text: ids whose digits spell the
pair across two of them (11, 2 with pair (1, 2)) are among its inputs, and the slip has its row
(the check's other rows are tested in test_bpe)."""

from gptlib.exercises import nb15_bpe as bpe


def _as_text(ids, pair, new_id):  # as a reader writes it
    a, b = pair
    return [
        int(t) for t in ",".join(str(i) for i in ids).replace(f"{a},{b}", str(new_id)).split(",")
    ]


def test_a_merge_on_the_ids_text_is_wrong_where_the_digits_spell_the_pair():
    assert _as_text([11, 2], (1, 2), 256) == [1256]  # what the issue measured
    assert bpe.solution_merge([11, 2], (1, 2), 256) == [11, 2]


def test_a_merge_on_the_ids_text_is_refused_with_its_slip():
    message = bpe.check_merge(_as_text).message
    assert message == f"✗ merge: {bpe.MISTAKES[-1][0]}"
    assert "matched in the text of the ids" in message


def test_the_reference_and_a_copy_of_it_pass():
    assert bpe.check_merge(bpe.solution_merge)
    assert bpe.check_merge(lambda ids, pair, new_id: bpe.solution_merge(list(ids), pair, new_id))
