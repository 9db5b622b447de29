// formatId and parseId: CosId's text forms with their options, as the core reads them.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { cosid, memoryConfig, expectError } from './helpers.mjs'

const { Runtime, formatId, parseId } = cosid

// The id of CosId's friendly converter test, and its text in each setting.
const ID = 295913926632165376n
const CASES = [
  ['dec', '295913926632165376'],
  ['hex', '41b4c2601005000'],
  ['base62', '0LrHucXALbs'],
  ['radix62,pad-start=false', 'LrHucXALbs'],
  ['radix36', '028XOQD7HM874'],
  ['radix36,pad-start=false,char-size=12', '28XOQD7HM874'],
  ['friendly', '20220320053617924-5-0'],
  ['friendly,zone=Asia/Shanghai', '20220320133617924-5-0'],
  ['friendly,zone=+08:00,pad-start=true', '20220320133617924-0005-0000'],
  ['radix62,prefix=ORD%2C,suffix=.x', 'ORD,0LrHucXALbs.x'],
  ['dec,pad-start=true,char-size=19', '0295913926632165376'],
]

test('each setting writes and reads the text CosId writes', () => {
  for (const [spec, text] of CASES) {
    assert.equal(formatId(ID, spec), text, spec)
    assert.equal(parseId(text, spec), ID, spec)
    assert.equal(parseId(text, spec, 'millis'), ID, spec)
  }
})

test('second layouts write 14 digits of time', async () => {
  const text = formatId(ID, 'friendly', 'seconds')
  assert.equal(text.split('-')[0].length, 14)
  assert.equal(parseId(text, 'friendly', 'seconds'), ID)
  await expectError(() => parseId(text, 'friendly'), Error, 'COSID_ERR_INVALID_ARGUMENT', 'not exactly 17 digits')
})

test("a runtime's layout is taken", async () => {
  const rt = await Runtime.create(memoryConfig({ snowflake: { preset: 'seconds' } }))
  try {
    const id = rt.next()
    const spec = 'friendly,zone=America/New_York,pad-start=true'
    const text = formatId(id, spec, rt.layout)
    assert.equal(text.split('-')[0].length, 14, text)
    assert.equal(parseId(text, spec, rt.layout), id)
    assert.equal(Number(text.split('-')[1]), rt.stats().slot)
  } finally {
    await rt.close()
  }
})

test('bad input is refused with what is expected', async () => {
  const invalid = [
    [() => formatId(ID, 'radix16'), 'is not an id format; expected dec, hex'],
    [() => formatId(ID, 'friendly,zone=Mars/Base'), 'is not a time zone'],
    [() => formatId(ID, 'radix62,char-size=5'), 'does not fit 5 radix-62 characters'],
    [() => formatId(ID, 'dec', 'minutes'), 'is not a preset layout'],
    [() => formatId(ID, 'dec', { epochMs: 0, unit: 'min', timestampBits: 41, nodeBits: 10, sequenceBits: 12 }), 'layout.unit'],
    [() => parseId('LrHucXALbs', 'base62'), 'exactly 11 characters'],
    [() => parseId('20220320133617924-5-0', 'friendly,pad-start=true'), '4 digits'],
    [() => parseId('20210314023000000-1-0', 'friendly,zone=America/New_York'), 'does not exist in America/New_York'],
  ]
  for (const [call, needle] of invalid) {
    await expectError(call, Error, 'COSID_ERR_INVALID_ARGUMENT', needle)
  }
  await expectError(() => formatId(ID, 62), TypeError, 'COSID_ERR_INVALID_ARGUMENT', 'format must be a string')
  await expectError(() => parseId(ID, 'dec'), TypeError, 'COSID_ERR_INVALID_ARGUMENT', 'text must be a string')
  await expectError(() => formatId(5, 'dec'), TypeError, 'COSID_ERR_INVALID_ARGUMENT', 'id must be a bigint')
})

test("a date prefix is today's in its zone", async () => {
  const spec = 'dec,prefix=P,date-prefix=yyyy-MM-dd,date-delimiter=_'
  const before = new Date().toISOString().slice(0, 10)
  const text = formatId(42n, spec)
  const after = new Date().toISOString().slice(0, 10)
  assert.ok(text[0] === 'P' && [before, after].includes(text.slice(1, 11)) && text.slice(11) === '_42', text)
  assert.equal(parseId(text, spec), 42n)
  await expectError(() => parseId('P2024-02-30_42', spec), Error, 'COSID_ERR_INVALID_ARGUMENT', 'no date of the pattern')
  await expectError(() => formatId(42n, 'dec,date-delimiter=_'), Error, 'COSID_ERR_INVALID_ARGUMENT', 'without date-prefix')
})
