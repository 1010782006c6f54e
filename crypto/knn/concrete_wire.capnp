# What petlab reads of concrete-python 2.11's wire format ("concrete protocol", Cap'n Proto):
# evaluation key sets and encrypted values. Field numbers and types are the protocol's (they fix
# the layout); names are ours, and only the structures read here are described. Read-only: petlab
# never writes these messages. Checked against real keys and ciphertexts in tests/crypto/knn/test_wire_format.py.
@0xd2a64233258d00f1;

enum SecretDistribution { binary @0; ternary @1; }
enum Compression { none @0; seed @1; paillier @2; }

struct Modulus {
  modulus :union { native @0 :Native; powerOfTwo @1 :PowerOfTwo; integer @2 :Integer; }
  struct Native {}
  struct PowerOfTwo { power @0 :UInt32; }
  struct Integer { modulus @0 :UInt32; }
}

struct Shape { dimensions @0 :List(UInt32); }
struct RawInfo { shape @0 :Shape; integerPrecision @1 :UInt32; isSigned @2 :Bool; }

# A payload is little-endian 64-bit words, cut into blobs no larger than a Data may be.
struct Payload { data @0 :List(Data); }

struct BootstrapParams {
  levelCount @0 :UInt32;
  baseLog @1 :UInt32;
  glweDimension @2 :UInt32;
  polynomialSize @3 :UInt32;
  variance @4 :Float64;
  integerPrecision @5 :UInt32;
  modulus @6 :Modulus;
  keyType @7 :SecretDistribution;
  inputLweDimension @8 :UInt32;
}
struct BootstrapInfo {
  id @0 :UInt32; inputId @1 :UInt32; outputId @2 :UInt32;
  params @3 :BootstrapParams; compression @4 :Compression;
}
struct BootstrapKey { info @0 :BootstrapInfo; payload @1 :Payload; }

struct KeyswitchParams {
  levelCount @0 :UInt32;
  baseLog @1 :UInt32;
  variance @2 :Float64;
  integerPrecision @3 :UInt32;
  modulus @4 :Modulus;
  keyType @5 :SecretDistribution;
  inputLweDimension @6 :UInt32;
  outputLweDimension @7 :UInt32;
}
struct KeyswitchInfo {
  id @0 :UInt32; inputId @1 :UInt32; outputId @2 :UInt32;
  params @3 :KeyswitchParams; compression @4 :Compression;
}
struct KeyswitchKey { info @0 :KeyswitchInfo; payload @1 :Payload; }

struct PackingParams {
  levelCount @0 :UInt32;
  baseLog @1 :UInt32;
  glweDimension @2 :UInt32;
  polynomialSize @3 :UInt32;
  inputLweDimension @4 :UInt32;
  innerLweDimension @5 :UInt32;
  variance @6 :Float64;
  integerPrecision @7 :UInt32;
  modulus @8 :Modulus;
  keyType @9 :SecretDistribution;
}
struct PackingInfo {
  id @0 :UInt32; inputId @1 :UInt32; outputId @2 :UInt32;
  params @3 :PackingParams; compression @4 :Compression;
}
struct PackingKey { info @0 :PackingInfo; payload @1 :Payload; }

struct ServerKeyset {
  lweBootstrapKeys @0 :List(BootstrapKey);
  lweKeyswitchKeys @1 :List(KeyswitchKey);
  packingKeyswitchKeys @2 :List(PackingKey);
}

struct IntegerEncoding {
  width @0 :UInt32;
  isSigned @1 :Bool;
  mode :union { native @2 :Native; chunked @3 :Chunked; crt @4 :Crt; }
  struct Native {}
  struct Chunked { size @0 :UInt32; width @1 :UInt32; }
  struct Crt { moduli @0 :List(UInt32); }
}
struct BooleanEncoding {}
struct Encryption {
  keyId @0 :UInt32; variance @1 :Float64; lweDimension @2 :UInt32; modulus @3 :Modulus;
}
struct CiphertextType {
  abstractShape @0 :Shape;
  concreteShape @1 :Shape;
  integerPrecision @2 :UInt32;
  encryption @3 :Encryption;
  compression @4 :Compression;
  encoding :union { integer @5 :IntegerEncoding; boolean @6 :BooleanEncoding; }
}
struct ClearType { shape @0 :Shape; integerPrecision @1 :UInt32; isSigned @2 :Bool; }
struct TypeInfo {
  union { lweCiphertext @0 :CiphertextType; plaintext @1 :ClearType; index @2 :ClearType; }
}
struct Value { payload @0 :Payload; rawInfo @1 :RawInfo; typeInfo @2 :TypeInfo; }
