// Why a .tinygpt file was refused, in plain words for the line beside the upload control. The readers'
// own messages (tinygpt_file.js, the same as python_ref's) are precise but written for programmers
// ("not a .tinygpt file: magic is b'Hell', expected b'TGPT'"); this turns the common ones into a
// sentence a person can act on, and keeps any other message without Python's byte syntax.

const n = (x) => Number(x).toLocaleString("en");

const PLAIN = [
  [/^file is truncated: (\d+) bytes, shorter than/, (m) => `it is cut short: ${n(m[1])} bytes, too few for even the start of a model file (truncated). Download or copy it again.`],
  [/^file is truncated/, () => "it is cut short: the file ends before the model does (truncated). Download or copy it again."],
  [/^not a \.tinygpt file/, () => "it is not a TinyGPT model file: a .tinygpt file begins with the letters TGPT, and this one does not."],
  [/^unknown \.tinygpt version (\d+)/, (m) => `it is a TinyGPT file of version ${m[1]}, which this page cannot read (it reads version 2).`],
  [/^header CRC32 mismatch/, () => "it is damaged: its description of the model does not match its checksum (header CRC32 mismatch)."],
  [/^header JSON invalid|^header lacks a valid headerCrc32|^header length/, () => "it is damaged: its description of the model cannot be read (bad header)."],
  [/^state CRC32 mismatch/, () => "it is damaged: its weights do not match their checksum (state CRC32 mismatch)."],
  [/^state length mismatch/, () => "it is damaged or cut short: it holds a different number of weight bytes than its model needs (state length mismatch)."],
  [/^non-finite value/, () => "its weights hold NaN or infinity: a model trained with too high a learning rate, which cannot be used."],
];

/** Python's bytes literal b'..' (and b"..") in a message, as the characters it holds in quotes. */
const withoutByteSyntax = (message) => message.replace(/\bb(['"])((?:\\.|(?!\1).)*)\1/g, (_, q, body) => `"${body}"`);

/** "name was not loaded: <why, in plain words>" for a reader's message about the file `name`. */
export function plainFileError(name, message) {
  for (const [pattern, say] of PLAIN) {
    const m = pattern.exec(message);
    if (m) return `${name} was not loaded: ${say(m)}`;
  }
  return `${name} was not loaded: ${withoutByteSyntax(message)}`;
}
