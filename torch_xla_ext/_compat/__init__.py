"""The only modules that touch torch_xla's private APIs, one per torch_xla subsystem, so a
torch_xla upgrade changes one file per subsystem. Nothing else in the package imports
torch_xla internals directly."""
