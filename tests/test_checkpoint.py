import os

import pytest
import torch

from gptlib.checkpoint import CheckpointError, check_writable, load_checkpoint, save_checkpoint
from gptlib.model import GPT
from gptlib.tokenizer import CharTokenizer
from gptlib.train import History, make_optimizer, train


@pytest.fixture
def trained(small_textbook):
    torch.manual_seed(0)
    model = GPT(small_textbook)
    tok = CharTokenizer.from_text("abcdefghij")  # 10 chars; vocab 11 with BOS
    tok = CharTokenizer(tok.chars, bos=".")
    opt = make_optimizer(model)
    hist = train(model, torch.randint(0, 11, (100,)), 3, 2, optimizer=opt)
    return model, tok, opt, hist


def test_roundtrip_gives_identical_logits(tmp_path, trained):
    model, tok, opt, hist = trained
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, model, tok, optimizer=opt, step=3, history=hist, extra={"note": "x"})
    ck = load_checkpoint(path)
    idx = torch.randint(0, 11, (2, 12))
    model.eval()
    assert torch.equal(model(idx)[0], ck.model(idx)[0])
    assert ck.config == model.cfg and ck.tokenizer == tok and ck.step == 3
    assert ck.history == hist and ck.extra == {"note": "x"}
    assert ck.model.lm_head.weight is ck.model.tok_emb.weight  # still tied after loading
    opt2 = make_optimizer(ck.model)
    opt2.load_state_dict(ck.optimizer_state)
    assert opt2.state_dict()["state"].keys() == opt.state_dict()["state"].keys()


def test_save_is_atomic(tmp_path, trained, monkeypatch):
    model, tok, _, _ = trained
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, model, tok)
    before = path.read_bytes()

    def broken_save(obj, f):
        f.write(b"half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, model, tok)
    assert path.read_bytes() == before  # the old checkpoint survives intact
    assert os.listdir(tmp_path) == ["ckpt.pt"]  # and no temporary file is left behind


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.pt"):
        load_checkpoint(tmp_path / "nothing.pt")


def test_truncated_file_is_named(tmp_path, trained):
    model, tok, _, _ = trained
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, model, tok)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"ckpt\.pt.*could not be read"):
        load_checkpoint(path)


def test_foreign_file_is_named(tmp_path):
    path = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(3)}, path)
    with pytest.raises(CheckpointError, match=r"other\.pt.*not a gptlib checkpoint"):
        load_checkpoint(path)
    text = tmp_path / "notes.pt"
    text.write_text("hello")
    with pytest.raises(CheckpointError, match=r"notes\.pt"):
        load_checkpoint(text)


def test_checkpoint_cannot_run_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    path = tmp_path / "evil.pt"
    torch.save({"format": "gptlib-checkpoint", "version": 1, "x": Evil()}, path)
    with pytest.raises(CheckpointError, match="evil.pt"):
        load_checkpoint(path)


def test_history_survives(tmp_path, trained):
    model, tok, _, _ = trained
    h = History(step=[0, 1], lr=[1.0, 2.0], loss=[3.0, 2.5], grad_norm=[1.0, 1.0], interrupted=True)
    save_checkpoint(tmp_path / "c.pt", model, tok, history=h)
    assert load_checkpoint(tmp_path / "c.pt").history == h


def test_training_record_survives(tmp_path, trained):
    model, tok, opt, hist = trained
    g = torch.Generator().manual_seed(7)
    record = {"settings": {"seed": 7}, "rng": {"batches": [g.get_state()]}}
    save_checkpoint(
        tmp_path / "c.pt", model, tok, optimizer=opt, step=3, history=hist, training=record
    )
    ck = load_checkpoint(tmp_path / "c.pt")
    assert ck.training["settings"] == {"seed": 7}
    g2 = torch.Generator()
    g2.set_state(ck.training["rng"]["batches"][0])
    assert torch.equal(torch.rand(3, generator=g2), torch.rand(3, generator=g))
    save_checkpoint(tmp_path / "d.pt", model, tok)
    assert load_checkpoint(tmp_path / "d.pt").training is None


def test_check_writable_before_any_training(tmp_path):
    check_writable(tmp_path / "new" / "deeper" / "m.pt")  # folders that can be created are fine
    assert os.path.isdir(tmp_path / "new" / "deeper")
    assert os.listdir(tmp_path / "new" / "deeper") == []  # the probe file is gone
    with pytest.raises(ValueError, match="is a folder"):
        check_writable(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match=r"cannot write the checkpoint .*file/m.pt.*--out"):
        check_writable(blocker / "m.pt")  # its "folder" is a file: cannot be created
    if os.geteuid() != 0:  # root writes anywhere, so a read-only folder only stops others
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        with pytest.raises(ValueError, match="cannot be created or written"):
            check_writable(ro / "m.pt")
