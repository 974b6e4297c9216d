"""The command line, `python -m gptlib`: the parser and `main` (`cli`); the train command's steps
and the run that loses nothing (`run`), behind typed settings (`settings`); what it checks before
any work (`claim`, `needs`); stop signals deferred to the end of a step (`signals`); large texts
(`large_text`); the sample command (`samples`); the end of a run (`report`); several processes
(`distributed`). It builds on the GPT and its training (`gptlib.model`, `gptlib.train`,
`gptlib.checkpoint`); neither the GPT nor the classroom imports from it."""
