"""The public functions' annotations: init_ and make return the type they are given (a TypeVar bound to
torch.nn.Module, so `model = init_(Net())` keeps Net's attributes for a type checker), and every
annotation resolves (typing.get_type_hints, as a type checker or a docs tool reads it)."""
import typing
from collections.abc import Callable

import torch

import layerinit
import layerinit.jax
import layerinit.torch as lt


def test_init_and_make_return_what_they_are_given():
    M = lt.M
    assert isinstance(M, typing.TypeVar) and M.__bound__ is torch.nn.Module
    hints = typing.get_type_hints(lt.init_)
    assert hints["module"] is M and hints["return"] is M
    hints = typing.get_type_hints(lt.make)
    assert hints["build"] == Callable[[], M] and hints["return"] is M


def test_init_returns_its_argument():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)

    net = Net()
    assert lt.init_(net, recipe="hf") is net


def test_every_public_annotation_resolves():
    for mod in (layerinit, layerinit.torch, layerinit.jax):
        for name in mod.__all__:
            f = getattr(mod, name)
            if callable(f) and not isinstance(f, type) and hasattr(f, "__code__"):
                typing.get_type_hints(f)  # raises NameError for a name the module does not define
