"""The HPC kernels' experiments (`wse experiments run NAME`): the stencil and BiCGSTAB, TLR-MVM and
EAM MD against their papers."""
