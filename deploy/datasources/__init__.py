"""Inputs that are not golden: calibration and held-out data from random values, image
directories, arrays (datasource) or text through a tokenizer (text)."""
