"""Translation: parallel text, encoder-decoder training, beam search, sacreBLEU."""
