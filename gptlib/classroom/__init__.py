"""The classroom around the GPT: what the notebooks draw (`viz`), the sliders (`widgets`), the
shape tables (`shapes`), the head-by-head views (`heads`) and the ladder of models (`ladder`).
Nothing in the GPT itself imports from here; the exercises (`gptlib.exercises`) and the
command line (`gptlib.commandline`) are the other two wings."""
