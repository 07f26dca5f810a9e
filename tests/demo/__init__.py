"""Tests of the example project and the README: the install steps and the sink's policy; CI also runs check_demo.py."""
