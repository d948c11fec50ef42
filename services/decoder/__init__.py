"""Decoder service: gRPC ``DecoderService`` turning token ids into text with the model's tokenizer,
and visual tokens into frames with a frozen frame tokenizer (``--video-tokenizer``).

Start it with ``rlvr-world serve decoder`` or ``python -m services.decoder``; ``README.md`` here
describes its settings, RPCs and errors.
"""
