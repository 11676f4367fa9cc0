"""Stand-in of `nki.isa`: see nki/language.py."""


def __getattr__(name):
    return "nki.isa." + name
