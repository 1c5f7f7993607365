"""Elementwise fusion on OpenCL devices (filled in below)."""


def fuse(nodes, trace, needed, consts):
    return nodes, 0
