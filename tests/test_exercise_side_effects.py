"""One rule for side effects, applied by every check through `compare` (README, "Exercises"): a
function that changes its inputs in place, moves torch's global random stream otherwise than the
reference, or builds a graph where the page runs the model under no_grad is refused by name; a
check leaves the global stream as it found it; adamw_step, whose page allows it, may update its
inputs in place."""

import torch

from gptlib.classroom.ladder import trainable
from gptlib.exercises import nb06_normalisation as norms
from gptlib.exercises import nb10_training_loop as training
from gptlib.exercises import nb12_generation as generation
from gptlib.exercises import nb13_kv_cache as kv_cache
from gptlib.exercises import nb14_your_gpt as your_gpt
from gptlib.exercises.nb10_training_loop import check_adamw_step, check_validation_loss
from gptlib.exercises.nb15_bpe import check_merge, solution_merge

GRAPH = "built a graph for a backward that nobody calls"


def test_a_validation_loss_that_reseeds_the_global_stream_is_named():
    def validation_loss(model, tokens, batch_size, n_batches, seed):
        torch.manual_seed(seed)  # the global stream reseeded as a side effect
        return training.solution_validation_loss(model, tokens, batch_size, n_batches, seed)

    message = check_validation_loss(validation_loss).message
    assert message.startswith("✗ validation_loss: your function moved torch's global random")


def test_a_validation_loss_with_gradients_on_is_named():
    def validation_loss(model, tokens, batch_size, n_batches, seed):
        with torch.enable_grad():
            was = model.training
            model.eval()
            g, total = torch.Generator().manual_seed(seed), 0.0
            for _ in range(n_batches):
                idx, labels = training.sample_batch(tokens, batch_size, model.cfg.block_size, g)
                total += model(idx, labels)[1].item()
            model.train(was)
            return total / n_batches

    assert GRAPH in check_validation_loss(validation_loss).message


def test_a_sample_step_without_no_grad_is_named_as_11_names_it():
    def sample_step(model, idx, temperature, top_k, top_p, generator):
        with torch.enable_grad():
            was = model.training
            logits = model.eval()(idx[:, -model.cfg.block_size :])[0][:, -1]
            model.train(was)
        if temperature == 0:
            return logits.argmax(-1, keepdim=True)
        logits = generation.solution_filter_logits(logits / temperature, top_k, top_p)
        return torch.multinomial(logits.softmax(-1), 1, generator=generator)

    assert GRAPH in generation.check_sample_step(sample_step).message


def test_a_decode_step_without_no_grad_is_named():
    def decode_step(model, idx_new, cache):
        with torch.enable_grad():
            return model(idx_new, cache=cache)[0]

    message = kv_cache.check_decode_step(decode_step).message
    assert message.startswith("✗ decode_step:") and GRAPH in message


def test_14s_sampler_runs_the_forward_only_under_the_steps_no_grad():
    """Notebook 14 assembles its sampler around notebook 12's step, whose check names a step that
    builds a graph (above): the loop runs the forward nowhere but in the step."""
    seen = []

    def forward_fn(w, idx, n_head):
        seen.append(torch.is_grad_enabled())
        return your_gpt.reference_forward(w, idx, n_head)

    g = torch.Generator().manual_seed(0)
    w = trainable(your_gpt._weights(g))  # weights that keep a gradient, as after training
    your_gpt.sample_names(forward_fn, w, your_gpt._H, 0, 4, g, 1.0, None, 10)
    assert seen and not any(seen)

    def step_with_graph(model, idx, temperature, top_k, top_p, generator):  # no no_grad
        logits = model(idx[:, -model.cfg.block_size :])[0][:, -1]
        return torch.multinomial(logits.detach().softmax(-1), 1, generator=generator)

    seen.clear()
    your_gpt.sample_names(forward_fn, w, your_gpt._H, 0, 4, g, 1.0, None, 3, step=step_with_graph)
    assert seen and all(seen)  # the no_grad was the step's, which notebook 12's check requires


def test_an_input_changed_in_place_is_named():
    def rmsnorm(x, gain, eps=1e-5):
        return x.div_((x.pow(2).mean(-1, keepdim=True) + eps).sqrt()).mul_(gain)

    def merge(ids, pair, new_id):
        ids[:] = solution_merge(ids, pair, new_id)
        return ids

    assert "changed its input x in place" in norms.check_rmsnorm(rmsnorm).message
    assert "changed its input ids in place" in check_merge(merge).message


def test_adamw_step_may_update_its_inputs_in_place_as_its_page_says():
    def adamw_step(param, grad, m, v, steps_done, lr, betas, eps, weight_decay):
        new = training.solution_adamw_step(param, grad, m, v, steps_done, lr, betas, eps,
                                           weight_decay)  # fmt: skip
        for old, value in zip((param, m, v), new, strict=True):
            old.copy_(value)
        return param, m, v

    assert check_adamw_step(adamw_step).passed


def test_a_check_gives_the_global_stream_back_as_it_found_it():
    def draws(x, gain, eps=1e-5):
        torch.rand(3)  # draws: refused, and the notebook's stream is given back all the same
        return norms.solution_rmsnorm(x, gain, eps)

    torch.manual_seed(0)
    assert "global random stream" in norms.check_rmsnorm(draws).message
    after = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(1))
