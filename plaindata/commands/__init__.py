"""``petlab-synth``'s subcommands, one module each (``add_arguments`` and ``run``): the argument
parsing and printing of the synthesizers, kept out of the mechanisms' modules."""
