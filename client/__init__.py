"""The device's side: key generation, encryption and decryption over the crypto API."""
