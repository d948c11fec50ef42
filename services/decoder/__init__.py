"""Decoder service: gRPC ``DecoderService`` turning token ids into text with the model's tokenizer.

Start it with ``rlvr-world serve decoder`` or ``python -m services.decoder``. Frame decoding
(visual tokens to frames) is part of the contract but not implemented here yet: ``DecodeFrames``
answers UNIMPLEMENTED until the video world-model work adds a frames decoder.
"""
